"""Two API nodes on one Redis and one PostgreSQL look like one process to stream clients."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import redis

from tests.conftest import REDIS_URL, Server
from tests.hub.wsutil import envelope, open_stream, post


def test_both_nodes_deliver_every_event_once_in_the_same_order(
    cluster: Callable[..., Server],
) -> None:
    """Producers post through both nodes at once; subscribers on both get every event once,
    in strictly increasing event_id order, the same sequence on both; the Redis connections
    are cut mid-burst and nothing is lost or repeated."""
    a, b = cluster(), cluster()
    user = a.create_user()
    sim = a.create_simulation(user)
    token = a.token(user)
    path = f"/simulation_events/{sim}?token={token}"

    async def scenario() -> tuple[list[int], list[int], list[int], list[int]]:
        on_a = await open_stream(f"{a.ws_url}{path}")
        on_b = await open_stream(f"{b.ws_url}{path}")
        all_on_b = await open_stream(f"{b.ws_url}/simulation_events/?token={token}")
        posted: list[int] = []

        async def produce(srv: Server, offset: int) -> None:
            async with httpx.AsyncClient(base_url=srv.base_url, auth=user.auth,
                                         timeout=30) as http:
                for batch in range(20):
                    posted.extend(await post(http, sim, [
                        envelope(sim, "vehicle_use", offset + batch * 10 + i) for i in range(10)
                    ]))
                    if batch == 10 and offset == 0:  # cut every node's Redis connection
                        redis.Redis.from_url(REDIS_URL).client_kill_filter(
                            _type="normal", skipme=True)

        await asyncio.gather(produce(a, 0), produce(b, 10_000))
        for collector in (on_a, on_b, all_on_b):
            await collector.wait_for(len(posted), timeout=30)
            await collector.close()
        return posted, on_a.ids, on_b.ids, all_on_b.ids

    posted, ids_a, ids_b, ids_all = asyncio.run(scenario())
    assert len(posted) == 400
    assert ids_a == sorted(posted)
    assert ids_b == ids_a
    assert ids_all == ids_a
    assert ids_a == list(range(ids_a[0], ids_a[0] + 400))  # contiguous ids, commit order


def test_a_client_resumes_on_the_other_node_without_a_gap(cluster: Callable[..., Server]) -> None:
    """Read some events on A, drop, resume on B with since=: exactly the rest arrives."""
    a, b = cluster(), cluster()
    user = a.create_user()
    sim = a.create_simulation(user)
    token = a.token(user)
    path = f"/simulation_events/{sim}?token={token}"

    async def scenario() -> tuple[list[int], list[int], list[int]]:
        async with httpx.AsyncClient(base_url=a.base_url, auth=user.auth, timeout=30) as http:
            first = await open_stream(f"{a.ws_url}{path}")
            ids = await post(http, sim, [envelope(sim, "vehicle_use", i) for i in range(50)])
            await first.wait_for(50, timeout=30)
            await first.close()
            ids += await post(http, sim, [envelope(sim, "vehicle_use", i) for i in range(50)])
            resumed = await open_stream(f"{b.ws_url}{path}&since={first.ids[-1]}")
            ids += await post(http, sim, [envelope(sim, "vehicle_use", i) for i in range(50)])
            await resumed.wait_for(100, timeout=30)
            await resumed.close()
            return ids, first.ids, resumed.ids

    ids, first, resumed = asyncio.run(scenario())
    assert first + resumed == ids


def test_a_change_made_on_one_node_reaches_the_other(cluster: Callable[..., Server]) -> None:
    """Deleting a simulation through A closes its streams on B (the bus carries the notice);
    a PATCH through A is what B's ingest sees (its cache is invalidated)."""
    a, b = cluster(), cluster()
    user = a.create_user()
    sim = a.create_simulation(user)
    token = a.token(user)
    with a.client(user) as http_a, b.client(user) as http_b:
        assert http_b.post(f"/api/v2/simulation/{sim}/events",
                           json=envelope(sim, "vehicle_use")).status_code == 201
        other = a.create_user()  # another organisation: B must refuse it once moved
        renamed = http_a.patch(f"/api/v2/simulation/{sim}", json={"name": "renamed"})
        assert renamed.status_code == 200
        assert http_b.get(f"/api/v2/simulation/{sim}").json()["name"] == "renamed"

        async def scenario() -> int | None:
            stream = await open_stream(f"{b.ws_url}/simulation_events/{sim}?token={token}")
            # Live on B before the delete: an event posted through A arrives on it.
            assert http_a.post(f"/api/v2/simulation/{sim}/events",
                               json=envelope(sim, "vehicle_use")).status_code == 201
            await stream.wait_for(1, timeout=10)
            assert len(stream.frames) == 1, "the stream on B is not live"
            assert http_a.delete(f"/api/v2/simulation/{sim}").status_code == 204
            return await stream.wait_closed(timeout=10)

        assert asyncio.run(scenario()) == 4006
        assert http_b.post(f"/api/v2/simulation/{sim}/events",
                           json=envelope(sim, "vehicle_use")).status_code == 404
    with b.client(other) as http:
        assert http.get(f"/api/v2/simulation/{sim}").status_code == 404
