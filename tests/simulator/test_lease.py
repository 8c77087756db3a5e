"""The lease store on SQLite and PostgreSQL: one owner per run, expiry, ``interrupted``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ridecast.simulator.hosting.lease import LeaseStore, effective_status
from ridecast.store.engine import create_engine, upgrade


class Clock:
    """A clock the test moves by hand, so that leases expire without waiting."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'lease.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def stores(database_url: str) -> AsyncIterator[tuple[LeaseStore, LeaseStore, Clock]]:
    await upgrade(database_url)
    engine = create_engine(database_url)
    clock = Clock()
    try:
        yield LeaseStore(engine, clock), LeaseStore(engine, clock), clock
    finally:
        await engine.dispose()


RUNNING = {"status": "running", "sim_ts": "2024-01-01T08:05:00+00:00", "kpis": {"bookings": 3}}


async def test_one_owner_until_the_lease_expires(
        stores: tuple[LeaseStore, LeaseStore, Clock]) -> None:
    """A takes the run; B cannot while A's lease holds on a running run; once it expires the
    run reads interrupted with A's last snapshot, B takes it, and A's writes are refused."""
    a, b, clock = stores
    assert await a.acquire(7, "A", 10)
    assert await a.write(7, "A", 10, RUNNING)
    assert not await b.acquire(7, "B", 10)
    record = await b.read(7)
    assert record is not None and record.owner_node == "A"
    assert effective_status(record, clock.t) == {**RUNNING, "owner_node": "A"}
    clock.t += 11
    record = await b.read(7)
    assert record is not None
    status = effective_status(record, clock.t)
    assert status["status"] == "interrupted" and status["interrupted_status"] == "running"
    assert status["kpis"] == {"bookings": 3}
    assert await b.acquire(7, "B", 10)
    assert not await a.write(7, "A", 10, RUNNING)
    assert await a.renew("A", {7}, 10) == set()
    assert await b.renew("B", {7}, 10) == {7}


async def test_a_finished_run_can_be_taken_at_once(
        stores: tuple[LeaseStore, LeaseStore, Clock]) -> None:
    """A live lease on a finished (not running or paused) run does not stop another start;
    a released lease reads as its final status."""
    a, b, clock = stores
    assert await a.acquire(8, "A", 10)
    await a.write(8, "A", 10, {**RUNNING, "status": "finished"})
    assert await b.acquire(8, "B", 10)
    await b.write(8, "B", 10, RUNNING)
    await b.release(8, "B", {**RUNNING, "status": "stopped"})
    record = await a.read(8)
    assert record is not None and effective_status(record, clock.t)["status"] == "stopped"


async def test_concurrent_first_starts_make_one_owner(
        stores: tuple[LeaseStore, LeaseStore, Clock]) -> None:
    """Two nodes taking a never-started run at the same moment: exactly one wins."""
    a, b, _clock = stores
    results = await asyncio.gather(*(
        store.acquire(9, node, 10) for store, node in [(a, "A"), (b, "B")] * 4))
    assert results.count(True) >= 1  # the winner, and its own later attempts
    record = await a.read(9)
    assert record is not None
    winners = {node for (_, node), ok in zip([(a, "A"), (b, "B")] * 4, results, strict=True)
               if ok}
    assert winners == {record.owner_node}
