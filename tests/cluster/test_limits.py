"""The limits hold for the cluster: two real nodes on one Redis and one PostgreSQL enforce
each limit as one process would (streams per user and per token, requests per key, failed
authentications), a dead node's streams are given back within its lease, and a node that
cannot reach Redis falls back to its own counts and says so."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.cluster.privateredis import PrivateRedis
from tests.conftest import (
    REDIS_URL,
    CrossNodeServer,
    Server,
    drop_cluster_pair,
    launch_cluster_pair,
    launch_server,
)
from tests.hub.wsutil import envelope
from tests.waiting import eventually, eventually_async


async def _open_replaying(url: str) -> tuple[ClientConnection, int | None]:
    """Connect; the close code when the server refuses the stream, else None.

    ``url`` replays at least one event (``since=0`` over a history that has one), so an
    accepted stream sends a frame and a refused one closes. (A ping round trip, tried
    before, raced: the pong could come before a refusal decided on Redis.)"""
    ws = await connect(url)
    try:
        await asyncio.wait_for(ws.recv(), 30)
    except ConnectionClosed:
        return ws, ws.close_code
    return ws, None


async def _codes(urls: list[str], stack: AsyncExitStack) -> list[int | None]:
    codes = []
    for url in urls:
        ws, code = await _open_replaying(url)
        stack.push_async_callback(ws.close)
        codes.append(code)
    return codes


SHARED = {"RIDECAST_WS_MAX_STREAMS_PER_USER": "3", "RIDECAST_WS_MAX_STREAMS_PER_TOKEN": "2",
          "RIDECAST_RATE_LIMIT_PER_KEY": "0.1", "RIDECAST_RATE_LIMIT_BURST": "4",
          "RIDECAST_AUTH_FAILURES_PER_USER": "4", "RIDECAST_AUTH_FAILURES_PER_ADDRESS": "6"}
"""Every limit small at once: each test has its own users (and the per-address test its own
address, 127.0.0.3), so they do not meet."""


def _drop(pair: CrossNodeServer) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{pair.bus_prefix}:limits:*"):
        client.delete(key)
    drop_cluster_pair(pair)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """Two nodes of one cluster with SHARED limits, for the module."""
    pair = launch_cluster_pair(tmp_path_factory.mktemp("limits"), SHARED)
    assert pair.other is not None
    yield pair, pair.other
    _drop(pair)


def test_streams_per_user_and_per_token_count_over_both_nodes(
    nodes: tuple[Server, Server],
) -> None:
    """Per user 3 and per token 2, over two nodes: a token's 3rd stream is refused 4102 on
    either node; the user's 4th (another token) likewise; closing one frees a slot that the
    other node can use."""
    a, b = nodes
    user = a.create_user()
    first, second = a.token(user), b.token(user)
    sim = a.create_simulation(user)
    with a.client(user) as http:  # one event in the history, for _open_replaying
        http.post(f"/api/v2/simulation/{sim}/events",
                  json=envelope(sim, "vehicle_use", 1)).raise_for_status()

    def url(srv: Server, token: str) -> str:
        return f"{srv.ws_url}/simulation_events/?token={token}&since=0"

    async def scenario() -> None:
        async with AsyncExitStack() as stack:
            assert await _codes([url(a, first), url(b, first)], stack) == [None, None]
            assert await _codes([url(a, first), url(b, first)], stack) == [4102, 4102]
            held, code = await _open_replaying(url(b, second))
            assert code is None
            assert await _codes([url(a, second)], stack) == [4102]  # the user's 4th
            await held.close()
            # The slot is given back on Redis shortly after the close.
            async def reopened() -> bool:
                ws, code = await _open_replaying(url(a, second))
                stack.push_async_callback(ws.close)
                return code is None

            await eventually_async(reopened, timeout=10, step=0.1,
                                   what="the slot given back on Redis")

    asyncio.run(scenario())


def test_a_dead_nodes_streams_are_given_back_within_its_lease(tmp_path: Path) -> None:
    """A node holding a user's every stream is SIGKILLed: within RIDECAST_LIMITS_LEASE_S
    the other node lets the user open them again."""
    pair = launch_cluster_pair(tmp_path, {"RIDECAST_WS_MAX_STREAMS_PER_USER": "2",
                                          "RIDECAST_LIMITS_LEASE_S": "2"})
    try:
        assert pair.other is not None
        _dead_node_gives_back(pair, pair.other)
    finally:
        _drop(pair)


def _dead_node_gives_back(a: Server, b: Server) -> None:
    user = a.create_user()
    token = a.token(user)
    sim = a.create_simulation(user)
    with a.client(user) as http:  # one event in the history, for _open_replaying
        http.post(f"/api/v2/simulation/{sim}/events",
                  json=envelope(sim, "vehicle_use", 1)).raise_for_status()
    url_a = f"{a.ws_url}/simulation_events/?token={token}&since=0"
    url_b = f"{b.ws_url}/simulation_events/?token={token}&since=0"

    async def codes_of(urls: list[str], stack: AsyncExitStack) -> list[int | None]:
        codes = []
        for url in urls:
            ws, code = await _open_replaying(url)
            stack.push_async_callback(ws.close)
            codes.append(code)
        return codes

    async def fill() -> list[int | None]:
        async with AsyncExitStack() as stack:
            codes = await codes_of([url_a, url_a], stack)
            codes += await codes_of([url_b], stack)
            a.process.send_signal(signal.SIGKILL)  # the streams stay counted on Redis
            a.process.wait(10)
            return codes

    assert asyncio.run(fill()) == [None, None, 4102]

    async def reopen() -> None:
        async with AsyncExitStack() as stack:

            async def opened() -> bool:
                ws, code = await _open_replaying(url_b)
                stack.push_async_callback(ws.close)
                assert code in (None, 4102), code
                return code is None

            await eventually_async(opened, timeout=30, step=0.2,
                                   what="the dead node's streams given back")
            assert await codes_of([url_b], stack) == [None]

    asyncio.run(reopen())


def test_requests_per_key_count_over_both_nodes(nodes: tuple[Server, Server]) -> None:
    """Rate 0.1/s, burst 4: two requests on each node spend the burst; the next, on either
    node, is 429 with Retry-After. Another key is not affected."""
    a, b = nodes
    user = a.create_user()
    other = a.create_user()
    with a.client(user) as on_a, b.client(user) as on_b:
        statuses = [http.get("/api/v2/simulation").status_code
                    for http in (on_a, on_b, on_a, on_b)]
        assert statuses == [200] * 4
        refused = [on_a.get("/api/v2/simulation"), on_b.get("/api/v2/simulation")]
    assert [r.status_code for r in refused] == [429, 429]
    assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)
    with b.client(other) as http:
        assert http.get("/api/v2/simulation").status_code == 200


def test_failed_authentications_count_over_both_nodes(nodes: tuple[Server, Server]) -> None:
    """Per (user, address) 4: two wrong keys through each node, then the next attempt on
    either node is 429; the same user's key from another address is still 200."""
    a, b = nodes
    victim = a.create_user()
    with httpx.Client(timeout=30) as http:
        statuses = [http.get(f"{srv.base_url}/api/v2/user/token/",
                             auth=(victim.name, f"x{i}")).status_code
                    for i, srv in enumerate((a, b, a, b))]
        assert statuses == [401] * 4
        assert http.get(f"{a.base_url}/api/v2/simulation", auth=(victim.name, "y")) \
            .status_code == 429
        assert http.get(f"{b.base_url}/api/v2/simulation", auth=victim.auth).status_code == 429
    with httpx.Client(timeout=30,
                      transport=httpx.HTTPTransport(local_address="127.0.0.2")) as http:
        assert http.get(f"{b.base_url}/api/v2/simulation", auth=victim.auth).status_code == 200


def test_failed_authentications_per_address_count_over_both_nodes(
    nodes: tuple[Server, Server],
) -> None:
    """Per address 6: three users each fail twice from 127.0.0.3, once through each node
    (3 failures per node, 2 per pair, under both per-node and per-pair limits); then that
    address is 429 on either node, even with another user's right key, while the same key
    from 127.0.0.1 is still 200."""
    a, b = nodes
    third = httpx.HTTPTransport(local_address="127.0.0.3")
    users = [a.create_user() for _ in range(3)]
    bystander = a.create_user()
    with httpx.Client(timeout=30, transport=third) as http:
        statuses = [http.get(f"{srv.base_url}/api/v2/user/token/",
                             auth=(user.name, f"x{i}")).status_code
                    for i, user in enumerate(users) for srv in (a, b)]
        assert statuses == [401] * 6
        refused = [http.get(f"{srv.base_url}/api/v2/simulation", auth=bystander.auth)
                   for srv in (a, b)]
    assert [r.status_code for r in refused] == [429, 429], [r.text for r in refused]
    assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)
    with b.client(bystander) as http:
        assert http.get("/api/v2/simulation").status_code == 200


def test_a_node_without_redis_counts_alone_and_says_so(
    tmp_path: Path, pg_url: str, private_redis: PrivateRedis,
) -> None:
    """Redis killed: /readyz and /metrics say the limits fell back to this node's counts,
    which still apply (the token's 3rd stream is refused); Redis back: cluster counts again."""
    srv = launch_server(tmp_path, {"RIDECAST_BUS_URL": private_redis.url,
                                   "RIDECAST_WS_MAX_STREAMS_PER_TOKEN": "2",
                                   "RIDECAST_LIMITS_LEASE_S": "1",
                                   "RIDECAST_BUS_TIMEOUT_S": "0.5"},
                        database_url=pg_url)
    try:
        user = srv.create_user()
        token = srv.token(user)
        sim = srv.create_simulation(user)
        with srv.client(user) as http:  # one event in the history, for _open_replaying
            http.post(f"/api/v2/simulation/{sim}/events",
                      json=envelope(sim, "vehicle_use", 1)).raise_for_status()

        def limits() -> str:
            return str(httpx.get(f"{srv.base_url}/readyz", timeout=10).json()["limits"])

        def fallback_metric() -> str:
            text = httpx.get(f"{srv.base_url}/metrics", timeout=10).text
            return next(line for line in text.splitlines()
                        if line.startswith("ridecast_limits_local_fallback "))

        assert limits() == "redis"
        assert fallback_metric().endswith(" 0.0")
        private_redis.kill()
        eventually(lambda: limits().startswith("local fallback"), what="the fallback", timeout=30,
                   step=0.1)
        assert fallback_metric().endswith(" 1.0")
        url = f"{srv.ws_url}/simulation_events/?token={token}&since=0"

        async def scenario() -> list[int | None]:
            async with AsyncExitStack() as stack:
                return await _codes([url, url, url], stack)

        assert asyncio.run(scenario()) == [None, None, 4102]
        private_redis.start()
        eventually(lambda: limits() == "redis", what="Redis to count again", timeout=30, step=0.1)
        assert fallback_metric().endswith(" 0.0")
    finally:
        srv.stop()
