"""The lease store on SQLite and PostgreSQL: one owner per run, expiry, ``interrupted``,
every lease dated by the database's clock whatever the nodes' clocks say."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ridecast.bus import MemoryBus, StoredEvent
from ridecast.simulator.hosting.lease import CLAIMED_STATUS, LeaseStore, effective_status
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.eventlog import EventLog, NewEvent
from ridecast.store.run_fence import LeaseLost, RunFence
from ridecast.store.simulator_journal import JournalRow, JournalRows
from ridecast.store.simulator_runs import RunRecord
from ridecast.store.tables import events, webhook_deliveries
from tests.waiting import eventually_async


class Clock:
    """A node's wall clock, off by ``skew`` seconds; leases must not care."""

    def __init__(self, skew: float = 0.0) -> None:
        self.skew = skew

    def __call__(self) -> float:
        return time.time() + self.skew


async def _expired(store: LeaseStore, simulation_id: int) -> bool:
    record = await store.read(simulation_id)
    return record is not None and not record.live()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'lease.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def journal_rows(database_url: str) -> AsyncIterator[tuple[LeaseStore, JournalRows]]:
    await upgrade(database_url)
    engine = create_engine(database_url)
    try:
        yield LeaseStore(engine), JournalRows(engine)
    finally:
        await engine.dispose()


@pytest.fixture
async def stores(database_url: str) -> AsyncIterator[tuple[LeaseStore, LeaseStore, Clock]]:
    await upgrade(database_url)
    engine = create_engine(database_url)
    clock = Clock()
    try:
        yield LeaseStore(engine, clock), LeaseStore(engine, Clock(-3600)), clock
    finally:
        await engine.dispose()


RUNNING = {"status": "running", "sim_ts": "2024-01-01T08:05:00+00:00", "kpis": {"bookings": 3}}


async def test_one_owner_until_the_lease_expires(
        stores: tuple[LeaseStore, LeaseStore, Clock]) -> None:
    """A takes the run; B cannot while A's lease holds on a running run; once it expires the
    run reads interrupted with A's last snapshot, B takes it, and A's writes are refused."""
    a, b, _clock = stores
    assert await a.acquire(7, "A", 10, CLAIMED_STATUS)
    assert await a.write(7, "A", 10, RUNNING)
    assert not await b.acquire(7, "B", 10, CLAIMED_STATUS)
    record = await b.read(7)
    assert record is not None and record.owner_node == "A"
    assert effective_status(record, record.read_at) == {**RUNNING, "owner_node": "A"}
    assert await a.write(7, "A", 0.2, RUNNING)  # a short lease, left to run out
    await eventually_async(lambda: _expired(b, 7), timeout=30, what="the short lease expired")
    record = await b.read(7)
    assert record is not None
    status = effective_status(record, record.read_at)
    assert status["status"] == "interrupted" and status["interrupted_status"] == "running"
    assert status["kpis"] == {"bookings": 3}
    assert await b.acquire(7, "B", 10, CLAIMED_STATUS)
    assert not await a.write(7, "A", 10, RUNNING)
    assert await a.renew("A", {7}, 10) == set()
    assert await b.renew("B", {7}, 10) == {7}


async def test_a_finished_run_can_be_taken_at_once(
        stores: tuple[LeaseStore, LeaseStore, Clock]) -> None:
    """A live lease on a finished (not running or paused) run does not stop another start;
    a released lease reads as its final status."""
    a, b, _clock = stores
    assert await a.acquire(8, "A", 10, CLAIMED_STATUS)
    await a.write(8, "A", 10, {**RUNNING, "status": "finished"})
    assert await b.acquire(8, "B", 10, CLAIMED_STATUS)
    await b.write(8, "B", 10, RUNNING)
    await b.release(8, "B", {**RUNNING, "status": "stopped"})
    record = await a.read(8)
    assert record is not None
    assert effective_status(record, record.read_at)["status"] == "stopped"


async def test_concurrent_first_starts_make_one_owner(
        stores: tuple[LeaseStore, LeaseStore, Clock]) -> None:
    """Two nodes taking a never-started run at the same moment: exactly one wins."""
    a, b, _clock = stores
    results = await asyncio.gather(*(
        store.acquire(9, node, 10, CLAIMED_STATUS) for store, node in [(a, "A"), (b, "B")] * 4))
    assert results.count(True) >= 1  # the winner, and its own later attempts
    record = await a.read(9)
    assert record is not None
    winners = {node for (_, node), ok in zip([(a, "A"), (b, "B")] * 4, results, strict=True)
               if ok}
    assert winners == {record.owner_node}


SPEC = {"run_id": "r1", "data": None, "start": "2024-01-01T08:00:00+00:00"}


async def test_skewed_node_clocks_neither_take_a_live_lease_nor_keep_a_dead_one(
        database_url: str) -> None:
    """One node's clock 30 s ahead, another's 30 s behind: the one ahead cannot take the
    live run of the one behind (by acquire, orphans or take_over), and a dead run of the one
    ahead is free to the one behind once its lease has passed by the database's clock, not
    30 s later by its owner's."""
    await upgrade(database_url)
    engine = create_engine(database_url)
    try:
        ahead = LeaseStore(engine, Clock(30))
        behind = LeaseStore(engine, Clock(-30))
        assert await behind.acquire(1, "behind", 10, CLAIMED_STATUS)
        assert await behind.write(1, "behind", 10, RUNNING, spec=SPEC)
        assert not await ahead.acquire(1, "ahead", 10, CLAIMED_STATUS)
        assert [r.simulation_id for r in await ahead.orphans()] == []
        record = await ahead.read(1)
        assert record is not None and record.live()
        forged = RunRecord(**{**_fields(record), "lease_until": 0.0})
        assert not await ahead.take_over(forged, "ahead", 10, RUNNING)
        assert (await ahead.read(1)).owner_node == "behind"  # type: ignore[union-attr]

        # The node ahead dies holding a short lease: the one behind sees it pass as soon
        # as the database's clock does (its own clock would hold it 60 s longer).
        assert await ahead.acquire(2, "ahead", 1, CLAIMED_STATUS)
        assert await ahead.write(2, "ahead", 1, RUNNING, spec={**SPEC, "run_id": "r2"})

        async def orphaned() -> bool:
            return 2 in [r.simulation_id for r in await behind.orphans()]

        await eventually_async(orphaned, what="the dead node's run orphaned")
        record = await behind.read(2)
        assert record is not None
        assert await behind.take_over(record, "behind", 10, RUNNING)
        # Each node's reading of the database's clock is its own, not its skewed one.
        assert abs(ahead.now() - behind.now()) < 5
    finally:
        await engine.dispose()


def _fields(record: RunRecord) -> dict[str, object]:
    return {name: getattr(record, name) for name in RunRecord.__slots__}


def _row(seq: int, command: str = "set_vehicle_enabled") -> JournalRow:
    return JournalRow(seq, 60.0 + seq, command, '{"vehicle_id": 1, "enabled": false}')


async def test_a_journal_entry_is_written_only_under_its_owners_live_lease(
        journal_rows: tuple[LeaseStore, JournalRows]) -> None:
    """An owner's entry is written while its lease holds; another node's, or the owner's
    once its lease has ended, is refused with nothing written. The same entry again (a
    retry whose first commit's answer was lost) stays a no-op, even after the lease."""
    leases, rows = journal_rows
    assert await leases.acquire(5, "A", 10, CLAIMED_STATUS)
    await rows.append(5, "run", _row(1), owner="A")
    with pytest.raises(LeaseLost):
        await rows.append(5, "run", _row(2), owner="B")
    with pytest.raises(LeaseLost):  # no lease row at all: nobody owns simulation 6's run
        await rows.append(6, "run6", _row(1), owner="A")
    assert [row.seq for row in await rows.page("run", after_seq=0, limit=10)] == [1]
    assert await leases.hand_over(5, "A", RUNNING, {})  # A's lease ends now
    await rows.append(5, "run", _row(1), owner="A")  # already there: a no-op
    with pytest.raises(LeaseLost):
        await rows.append(5, "run", _row(2), owner="A")
    assert [row.seq for row in await rows.page("run", after_seq=0, limit=10)] == [1]
    assert await leases.acquire(5, "B", 10, CLAIMED_STATUS)
    await rows.append(5, "run", _row(2), owner="B")
    assert [row.seq for row in await rows.page("run", after_seq=0, limit=10)] == [1, 2]


def _new_event(simulation_id: int, n: int, webhook: bool = False) -> NewEvent:
    return NewEvent(simulation_id=simulation_id, org_id=1, owner_id=1,
                    message_type="vehicle_use", body=b'{"n":%d}' % n,
                    webhook_url="http://127.0.0.1:9/hook" if webhook else None)


async def test_a_runs_events_are_written_only_under_its_owners_live_lease(
        database_url: str) -> None:
    """The event log's fenced append (a run's owner publishing its events): stored and
    published while the owner's lease holds; another node's, one for a run nobody owns, or
    the owner's once its lease has ended, is refused whole (``LeaseLost``), with nothing
    stored, queued for delivery or published, and the unfenced appends queued beside it
    are stored as usual."""
    await upgrade(database_url)
    engine = create_engine(database_url)
    bus = MemoryBus()
    published: list[StoredEvent] = []
    bus.subscribe(lambda messages: published.extend(
        m for m in messages if isinstance(m, StoredEvent)))
    event_log = EventLog(engine, bus, max_batch=500)
    await event_log.start()
    leases = LeaseStore(engine)
    try:
        assert await leases.acquire(5, "A", 10, CLAIMED_STATUS)
        owned = await event_log.append([_new_event(5, n, webhook=n % 2 == 1)
                                        for n in range(4)], fence=RunFence(5, "A"))
        assert [e.simulation_id for e in owned] == [5] * 4
        beside = await asyncio.gather(
            event_log.append([_new_event(7, 0)]),
            event_log.append([_new_event(5, 9, webhook=True)], fence=RunFence(5, "B")),
            event_log.append([_new_event(7, 1)]), return_exceptions=True)
        assert isinstance(beside[1], LeaseLost)
        assert [len(result) for result in (beside[0], beside[2])
                if isinstance(result, list)] == [1, 1]
        with pytest.raises(LeaseLost):  # nobody owns simulation 6's run
            await event_log.append([_new_event(6, 0)], fence=RunFence(6, "A"))
        assert await leases.hand_over(5, "A", RUNNING, {})  # A's lease ends now
        with pytest.raises(LeaseLost):
            await event_log.append([_new_event(5, 10, webhook=True)], fence=RunFence(5, "A"))
        assert await leases.acquire(5, "B", 10, CLAIMED_STATUS)
        taken_over = await event_log.append([_new_event(5, 11)], fence=RunFence(5, "B"))
    finally:
        await event_log.close()
    async with engine.connect() as conn:
        stored = (await conn.execute(select(events.c.simulation_id, events.c.body)
                                     .order_by(events.c.id))).all()
        deliveries = (await conn.execute(
            select(func.count()).select_from(webhook_deliveries))).scalar_one()
    await engine.dispose()
    assert [(sim, bytes(body)) for sim, body in stored] == [
        *((5, b'{"n":%d}' % n) for n in range(4)), (7, b'{"n":0}'), (7, b'{"n":1}'),
        (5, b'{"n":11}')]
    assert deliveries == 2  # the owner's two; none of the refused ones
    assert [e.event_id for e in published] == [e.event_id for e in
                                               [*owned, beside[0][0], beside[2][0], *taken_over]]
