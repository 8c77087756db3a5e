"""What a node does while its Redis hangs or is down: ``/readyz`` answers within its bound,
ingest still commits, and the log says what happened in a few lines, not a traceback per
failed publish. A real node on PostgreSQL and a private ``redis-server`` (paused with
SIGSTOP or killed), never the machine's Redis."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx
import pytest

from ridecast.bus import BusMessage, SimulationChanged
from ridecast.bus.redis import RedisBus
from ridecast.errors import ServiceUnavailable
from tests.cluster.privateredis import PrivateRedis
from tests.conftest import Server, launch_server
from tests.hub.wsutil import envelope
from tests.waiting import eventually, eventually_async

PROBE_TIMEOUT_S = 3.0
"""A load balancer's usual health-probe time-out: /readyz must answer well within it."""


def _ready(srv: Server) -> httpx.Response:
    return httpx.get(f"{srv.base_url}/readyz", timeout=PROBE_TIMEOUT_S)


def test_readyz_answers_in_time_while_redis_hangs(tmp_path: Path, pg_url: str,
                                                  private_redis: PrivateRedis) -> None:
    """Redis stopped (SIGSTOP: connections accepted, nothing answered): /readyz answers 503
    naming the bus, within a 3 s probe (RIDECAST_READY_TIMEOUT_S is 1 s), while ingest still
    commits; once Redis runs again /readyz is 200."""
    srv = launch_server(tmp_path, {"RIDECAST_BUS_URL": private_redis.url},
                        database_url=pg_url)
    try:
        user = srv.create_user()
        sim = srv.create_simulation(user)
        assert _ready(srv).status_code == 200
        private_redis.pause()
        try:
            for _probe in range(3):
                answer = _ready(srv)  # raises ReadTimeout if it takes longer than the probe
                assert answer.status_code == 503, answer.text
                assert answer.json()["bus"] == "unavailable: timeout after 1 s"
                assert answer.json()["store"] == "ok"
                assert answer.headers["Retry-After"] == "1"
            with srv.client(user) as http:
                posted = http.post(f"/api/v2/simulation/{sim}/events",
                                   json=[envelope(sim, "vehicle_use", n) for n in range(3)])
                assert posted.status_code == 201, posted.text
        finally:
            private_redis.resume()
        eventually(lambda: _ready(srv).status_code == 200, what="/readyz to be 200 again",
                   timeout=30, step=0.1)
    finally:
        srv.stop()


_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _log_lines(srv: Server) -> list[str]:
    """The log's records (a traceback's lines belong to the record above them)."""
    return [line for line in srv.logs().splitlines() if _LINE.match(line)]


def test_a_redis_outage_is_a_few_log_lines(tmp_path: Path, pg_url: str,
                                           private_redis: PrivateRedis) -> None:
    """Redis killed while events keep coming (every commit's publish fails): the node logs
    one line when the link breaks, then at most one summary per
    RIDECAST_OUTAGE_LOG_INTERVAL_S, no traceback, and one line when Redis is back."""
    interval_s = 1.0
    srv = launch_server(tmp_path, {"RIDECAST_BUS_URL": private_redis.url,
                                   "RIDECAST_OUTAGE_LOG_INTERVAL_S": str(interval_s)},
                        database_url=pg_url)
    try:
        user = srv.create_user()
        sim = srv.create_simulation(user)
        before = len(srv.logs().splitlines())
        private_redis.kill()
        began = time.monotonic()
        with srv.client(user) as http:
            for n in range(60):  # 60 commits, so 60 failed publishes
                posted = http.post(f"/api/v2/simulation/{sim}/events",
                                   json=[envelope(sim, "vehicle_use", n * 5 + k)
                                         for k in range(5)])
                assert posted.status_code == 201, posted.text
            # A change of a simulation while the bus is down: committed and answered.
            assert http.patch(f"/api/v2/simulation/{sim}",
                              json={"name": "renamed"}).status_code == 200
            assert http.get(f"/api/v2/simulation/{sim}").json()["name"] == "renamed"
        window_s = time.monotonic() - began
        during = srv.logs().splitlines()[before:]
        assert not any("Traceback" in line for line in during), "\n".join(during)
        records = [line for line in during if _LINE.match(line)]
        assert sum("Redis bus unreachable" in line for line in records) == 1, records
        summaries = sum("Redis bus still unreachable" in line for line in records)
        assert summaries <= window_s / interval_s + 1, records
        # Nothing else is logged per failure: the whole outage fits in a few lines (the
        # bus's and the quotas' first lines, and the bus's summaries).
        assert len(records) <= 3 + window_s / interval_s, records

        private_redis.start()
        eventually(lambda: any("Redis bus reachable again" in line for line in _log_lines(srv)),
                   what="the line saying Redis is back", timeout=30, step=0.1)
        assert sum("Redis bus reachable again" in line for line in _log_lines(srv)) == 1
    finally:
        srv.stop()


def test_a_hung_redis_holds_a_publish_once_not_per_batch(private_redis: PrivateRedis) -> None:
    """Redis stopped (SIGSTOP): the first publish gives up after RIDECAST_BUS_TIMEOUT_S
    with ServiceUnavailable; the publishes right after it fail at once without trying
    (so the event log's publisher is not held a time-out per batch); once Redis runs
    again, publishing works and the messages arrive."""
    bus = RedisBus(private_redis.url, prefix="outage", timeout_s=0.5)
    arrived: list[BusMessage] = []
    change = SimulationChanged(1, 1, 1)

    async def scenario() -> None:
        await bus.start()
        bus.subscribe(lambda messages: arrived.extend(messages))
        try:
            private_redis.pause()
            try:
                with pytest.raises(ServiceUnavailable):
                    await bus.publish([change])  # tried, timed out
                assert bus.skipped == 0 and not bus.link.up
                for _ in range(5):
                    with pytest.raises(ServiceUnavailable):
                        await bus.publish([change])
                assert bus.skipped == 5
            finally:
                private_redis.resume()
            async def published() -> bool:
                await bus.publish([change])
                return True

            # The reader reconnects; a publish after the probe interval tries.
            await eventually_async(published, timeout=30, step=0.1,
                                   ignoring=(ServiceUnavailable,),
                                   what="publishing working again")
            assert bus.link.up
            await eventually_async(lambda: arrived, timeout=30, what="the message arriving")
        finally:
            await bus.close()

    asyncio.run(scenario())
