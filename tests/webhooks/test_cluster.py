"""Two ``ridecast worker`` processes on one store (PostgreSQL, then one SQLite file), an API
node without workers, one receiver.

Every event arrives, each simulation's events first arrive in event_id order, the
per-endpoint limit holds across both workers, and after SIGKILL of one worker mid-burst the
other delivers what it held once the lease runs out. The PostgreSQL case is skipped without
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
from collections.abc import Callable

from sqlalchemy import func, select

from ridecast.cli.receiver import ReceiverThread, Reply, Request
from ridecast.store.engine import create_engine
from ridecast.store.tables import webhook_deliveries as D
from tests.conftest import Server

from .helpers import post_events, start_worker, vehicle_use, wait_for

LIMIT = 2
FIRST_LEASE_S, SECOND_LEASE_S = 1.0, 1.5
WORKER_ENV = {
    "RIDECAST_WEBHOOK_TIMEOUT_S": "0.5",
    "RIDECAST_WEBHOOK_CONCURRENCY_PER_ENDPOINT": str(LIMIT),
    "RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[0.2, 0.2, 0.2, 0.2, 0.2]",
    "RIDECAST_WEBHOOK_RETRY_JITTER": "0",
}


class Counting:
    """An async receiver handler: records (simulation, event id) and the most in flight."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[int, int]] = []
        self.inflight = 0
        self.max_inflight = 0

    async def __call__(self, request: Request) -> Reply:
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            await asyncio.sleep(0.003)
        finally:
            self.inflight -= 1
        sim = int(request.json()["simulation_id"])  # type: ignore[index]
        self.arrivals.append((sim, int(request.headers["webhook-id"].removeprefix("msg_"))))
        return Reply(204)

    def distinct(self) -> set[int]:
        return {event for _sim, event in self.arrivals}


def _worker(pg_url: str, lease_s: float) -> subprocess.Popen[bytes]:
    return start_worker(pg_url, {**WORKER_ENV,
                                  "RIDECAST_WEBHOOK_LEASE_S": str(lease_s)})


def _leased_by(pg_url: str, lease_s: float) -> set[int]:
    """Deliveries leased by the worker whose lease is ``lease_s`` (each worker has its own,
    and a claim or renewal sets lease_until = updated_at + lease)."""
    async def run() -> set[int]:
        engine = create_engine(pg_url)
        try:
            async with engine.connect() as conn:
                return set(await conn.scalars(select(D.c.id).where(
                    D.c.status == "delivering",
                    func.abs(D.c.lease_until - D.c.updated_at - lease_s) < 0.05)))
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _succeeded(pg_url: str, ids: set[int]) -> bool:
    async def run() -> bool:
        engine = create_engine(pg_url)
        try:
            async with engine.connect() as conn:
                done = await conn.scalar(select(func.count()).select_from(D).where(
                    D.c.id.in_(sorted(ids)), D.c.status == "succeeded"))
                return done == len(ids)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def test_two_workers_order_limit_and_takeover_after_sigkill(
    store_url: str, start_server: Callable[..., Server]
) -> None:
    """4 simulations x 250 events through two workers; one is killed mid-burst."""
    pg_url = store_url  # the name the helpers use; either store
    counting = Counting()
    server = start_server({"RIDECAST_WEBHOOK_WORKERS": "false"}, database_url=pg_url)
    first = _worker(pg_url, FIRST_LEASE_S)
    second: subprocess.Popen[bytes] | None = None
    try:
        with ReceiverThread(counting) as receiver:
            user = server.create_user()
            hook = {"messaging_webhook_url": receiver.url,
                    "messaging_webhook_message_types": ["vehicle_use"]}
            sims = [server.create_simulation(user, hook) for _ in range(4)]
            sent: dict[int, list[int]] = {}
            with server.client(user) as http:
                for sim in sims:
                    sent[sim] = []
                    for start in range(0, 250, 50):
                        sent[sim] += map(int, post_events(
                            http, sim, [vehicle_use(i) for i in range(start, start + 50)]))
            wait_for(lambda: len(counting.distinct()) >= 100, timeout=60)
            second = _worker(pg_url, SECOND_LEASE_S)
            seen = len(counting.distinct())
            wait_for(lambda: len(counting.distinct()) >= seen + 100, timeout=60)
            wait_for(lambda: bool(_leased_by(pg_url, FIRST_LEASE_S)), timeout=10, step=0.005)
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            orphans = _leased_by(pg_url, FIRST_LEASE_S)  # held by the dead worker
            every = {e for ids in sent.values() for e in ids}
            wait_for(lambda: counting.distinct() >= every, timeout=90)
            wait_for(lambda: _succeeded(pg_url, orphans), timeout=30)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(15)
    assert orphans, "the killed worker held no lease at the kill: nothing was taken over"
    assert counting.max_inflight <= LIMIT
    for sim in sims:
        firsts = [e for s, e in counting.arrivals if s == sim]
        order = list(dict.fromkeys(firsts))  # first arrival of each event
        assert order == sent[sim], [
            (a, b) for a, b in itertools.pairwise(order) if b < a][:5]
