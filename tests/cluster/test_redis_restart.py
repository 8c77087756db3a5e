"""A cluster whose Redis dies and comes back: streams on every node lose nothing and repeat
nothing. Runs a private ``redis-server`` on a free port, so the machine's Redis is untouched."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.cluster.privateredis import PrivateRedis
from tests.conftest import Server, launch_server
from tests.hub.wsutil import envelope, open_stream, post
from tests.waiting import eventually_async


def test_streams_survive_a_redis_restart(tmp_path: Path, pg_url: str,
                                         private_redis: PrivateRedis) -> None:
    """Redis is killed mid-stream and restarted empty. Events posted before, during and after
    the outage all reach the streams of both nodes, once each, in event_id order: during the
    outage the nodes fill from the log, after it they read the new stream."""
    env = {"RIDECAST_BUS_URL": private_redis.url, "RIDECAST_BUS_CATCH_UP_INTERVAL_S": "0.2"}
    nodes: list[Server] = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            nodes.append(launch_server(tmp_path / name, env, database_url=pg_url))
        a, b = nodes
        user = a.create_user()
        sim = a.create_simulation(user)
        token = a.token(user)
        path = f"/simulation_events/{sim}?token={token}"

        async def scenario() -> tuple[list[int], list[int], list[int]]:
            on_a = await open_stream(f"{a.ws_url}{path}")
            on_b = await open_stream(f"{b.ws_url}{path}")
            posted: list[int] = []
            async with httpx.AsyncClient(base_url=a.base_url, auth=user.auth,
                                         timeout=30) as http:
                async def burst(offset: int) -> None:
                    for i in range(5):
                        posted.extend(await post(http, sim, [
                            envelope(sim, "vehicle_use", offset + i * 4 + k) for k in range(4)
                        ]))

                await burst(0)
                await on_b.wait_for(len(posted), timeout=30)
                private_redis.kill()
                await burst(100)  # committed while Redis is down: publishing fails
                await on_b.wait_for(len(posted), timeout=30)  # filled from the log
                await asyncio.to_thread(private_redis.start)
                # Redis answers each node again; their readers reconnect with a back-off
                # meanwhile, and what they miss the catch-up fills either way.
                await eventually_async(
                    lambda: all(httpx.get(f"{n.base_url}/readyz", timeout=10).status_code
                                == 200 for n in nodes),
                    timeout=30, step=0.1, what="both nodes ready again")
                await burst(200)
            for collector in (on_a, on_b):
                await collector.wait_for(len(posted), timeout=30)
                await collector.close()
            return posted, on_a.ids, on_b.ids

        posted, ids_a, ids_b = asyncio.run(scenario())
    finally:
        for srv in nodes:
            srv.stop()
    assert len(posted) == 60
    assert ids_a == posted
    assert ids_b == posted
    assert "Redis bus unreachable" in b.logs()  # the outage was real, and noticed
