"""A store outage under a real ``ridecast serve`` on PostgreSQL: every route answers 503
``service_unavailable`` with ``Retry-After``, never 500 ``internal_error``, and the node
serves again as soon as the database does.

The outage is made on the machine's real PostgreSQL, on the test's own database only: its
backends are terminated (``pg_terminate_backend``, what a failover or a restart does to
open connections), and for the deterministic part the database refuses new connections
(``ALLOW_CONNECTIONS false``) while they are terminated.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import Server, User, _postgres_admin, launch_server
from tests.hub.wsutil import envelope
from tests.waiting import eventually, eventually_async


def _database(srv: Server) -> str:
    return srv.database_url.rsplit("/", 1)[1]


def _terminate_backends(srv: Server) -> None:
    asyncio.run(_postgres_admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{_database(srv)}' AND pid <> pg_backend_pid()"
    ))


def _allow_connections(srv: Server, allow: bool) -> None:
    value = "true" if allow else "false"
    asyncio.run(_postgres_admin(f'ALTER DATABASE "{_database(srv)}" ALLOW_CONNECTIONS {value}'))


def _assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "service_unavailable"
    assert int(response.headers["Retry-After"]) >= 1


LOG_INTERVAL_S = 1.0


@pytest.fixture
def pg_server(tmp_path: Path, pg_url: str) -> Iterator[Server]:
    srv = launch_server(tmp_path, {"RIDECAST_OUTAGE_LOG_INTERVAL_S": str(LOG_INTERVAL_S)},
                        database_url=pg_url)
    yield srv
    srv.stop()
    _allow_connections(srv, True)  # so that pg_url's teardown can drop it


def _routes(sim: int) -> list[tuple[str, str, object]]:
    return [
        ("GET", f"/api/v2/simulation/{sim}/simulator", None),
        ("GET", f"/api/v2/simulation/{sim}", None),
        ("GET", "/api/v2/simulation", None),
        ("GET", "/api/v2/user/token/", None),
        ("GET", f"/api/v2/simulation/{sim}/events", None),
        ("POST", f"/api/v2/simulation/{sim}/events", envelope(sim, "offer_accepted", 1)),
    ]


def test_every_route_answers_503_while_the_database_refuses(pg_server: Server) -> None:
    """Backends terminated and new connections refused: each route (simulator status,
    simulations, token, history, ingest) answers 503 with Retry-After; once the database
    accepts connections again, the same requests succeed on the same node."""
    srv = pg_server
    user: User = srv.create_user()
    sim = srv.create_simulation(user)
    with srv.client(user) as http:
        assert http.get(f"/api/v2/simulation/{sim}/simulator").status_code == 200
        _allow_connections(srv, False)
        _terminate_backends(srv)
        try:
            for method, path, body in _routes(sim):
                _assert_unavailable(http.request(method, path, json=body))
        finally:
            _allow_connections(srv, True)
        eventually(lambda: http.get(f"/api/v2/simulation/{sim}/simulator").status_code == 200,
                   timeout=30, step=0.1, what="the node serving again")
        for method, path, body in _routes(sim):
            assert http.request(method, path, json=body).status_code < 300, path
    assert "internal_error" not in srv.logs()
    assert "unhandled error" not in srv.logs()


def test_health_says_unavailable_without_the_drivers_words(pg_server: Server) -> None:
    """While the database refuses, the public /healthz and /readyz answer 503 naming the kind
    of failure only: no host, no database name, no driver message; then 200 again."""
    srv = pg_server
    database = _database(srv)
    _allow_connections(srv, False)
    _terminate_backends(srv)
    try:
        for path in ("/healthz", "/readyz"):
            response = httpx.get(f"{srv.base_url}{path}", timeout=10)
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"] == "1"
            store = response.json()["store"]
            assert re.fullmatch(r"unavailable: [A-Za-z]+", store), store
            for secret in (database, "127.0.0.1", "5432", "postgres", "SELECT"):
                assert secret not in response.text, (secret, response.text)
    finally:
        _allow_connections(srv, True)
    eventually(lambda: httpx.get(f"{srv.base_url}/healthz", timeout=10).status_code == 200,
               timeout=30, step=0.1, what="/healthz recovering")
    assert httpx.get(f"{srv.base_url}/healthz", timeout=10).json()["status"] == "ok"


def test_a_busy_pool_answers_503_not_500(tmp_path: Path, pg_url: str) -> None:
    """One store connection per process, held by a query that waits for a table lock taken
    from outside: a request that needs a connection waits RIDECAST_DATABASE_POOL_TIMEOUT_S
    and gets 503 service_unavailable with Retry-After (it was a 500 after 30 s); once the
    lock is released the node serves again, and nothing answered 500."""
    srv = launch_server(tmp_path, {"RIDECAST_DATABASE_POOL_SIZE": "1",
                                   "RIDECAST_DATABASE_POOL_OVERFLOW": "0",
                                   "RIDECAST_DATABASE_POOL_TIMEOUT_S": "0.5"},
                        database_url=pg_url)
    user: User = srv.create_user()
    srv.create_simulation(user)

    async def scenario() -> None:
        admin = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
        try:
            with srv.client(user) as http, srv.client(user) as other:
                lock = admin.transaction()
                await lock.start()
                await admin.execute("LOCK TABLE simulations IN ACCESS EXCLUSIVE MODE")
                blocked = asyncio.ensure_future(asyncio.to_thread(
                    http.get, "/api/v2/simulation", timeout=60))
                await _a_query_waits_on_the_lock(admin)
                _assert_unavailable(await asyncio.to_thread(
                    other.get, "/api/v2/simulation", timeout=30))
                await lock.rollback()
                first = await asyncio.wait_for(blocked, 60)
                assert first.status_code in (200, 503), first.text
        finally:
            await admin.close()
        with srv.client(user) as http:
            await eventually_async(lambda: http.get("/api/v2/simulation").status_code == 200,
                                   timeout=30, step=0.1, what="the node serving again")

    try:
        asyncio.run(scenario())
        assert "every connection to the store was in use" in srv.logs()
        assert "internal_error" not in srv.logs()
        assert "unhandled error" not in srv.logs()
    finally:
        srv.stop()


async def _a_query_waits_on_the_lock(admin: asyncpg.Connection) -> None:
    """Until one of the node's queries (the listing's, or a background task's that took the
    connection first) waits for the lock: the node's only connection is then held."""
    await eventually_async(lambda: admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"), timeout=30, step=0.02,
        what="a query of the node waiting on the lock")


def test_terminated_connections_never_give_a_500(pg_server: Server) -> None:
    """Backends terminated under a live node, again and again: each request answers 200 or
    503 with Retry-After (the one that meets the dead connection), never 500; and a 503 was
    seen at least once (the dead connection was met by a request, not only by a loop)."""
    srv = pg_server
    user: User = srv.create_user()
    sim = srv.create_simulation(user)
    seen_503 = 0
    with srv.client(user) as http:
        http.get(f"/api/v2/simulation/{sim}/simulator").raise_for_status()
        for _round in range(40):
            _terminate_backends(srv)
            response = http.get(f"/api/v2/simulation/{sim}/simulator")
            if response.status_code == 503:
                _assert_unavailable(response)
                seen_503 += 1
                if seen_503 >= 3:
                    break
            else:
                assert response.status_code == 200, response.text
    assert seen_503 >= 1
    assert "unhandled error" not in srv.logs()


_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def test_an_outage_is_a_few_log_lines(pg_server: Server) -> None:
    """While the database refuses, requests and the node's loops (revocations, webhook
    claims, retention) keep failing: the log gets one line when the store stops answering,
    at most one summary per RIDECAST_OUTAGE_LOG_INTERVAL_S, no traceback, and one line
    when it answers again."""
    srv = pg_server
    user: User = srv.create_user()
    sim = srv.create_simulation(user)
    before = len(srv.logs().splitlines())
    with srv.client(user) as http:
        _allow_connections(srv, False)
        _terminate_backends(srv)
        began = time.monotonic()
        try:
            for _ in range(30):
                _assert_unavailable(http.get(f"/api/v2/simulation/{sim}/simulator"))
                time.sleep(0.1)  # the requests are spread over a few log intervals
        finally:
            _allow_connections(srv, True)
        window_s = time.monotonic() - began
        eventually(lambda: http.get(f"/api/v2/simulation/{sim}").status_code == 200,
                   timeout=30, step=0.1, what="the node serving again")
    eventually(lambda: "store (database) reachable again" in srv.logs(), timeout=30, step=0.1,
               what="a line saying the store is back")
    during = srv.logs().splitlines()[before:]
    assert not any("Traceback" in line for line in during), "\n".join(during)
    records = [line for line in during if _RECORD.match(line)]
    assert sum("store (database) unreachable" in line for line in records) == 1, records
    assert sum("store (database) reachable again" in line for line in records) == 1, records
    # The line that it broke, the summaries, the line that it is back; nothing per failure.
    assert len(records) <= 2 + window_s / LOG_INTERVAL_S + 1, records
