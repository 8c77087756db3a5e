"""The journal: a run's events are a function of its spec and its journal.

A runner journals each operation it accepts (and no refused one) with the simulated time it
applied at; a second runner given that journal replays the same events, and one told how
far the first had published (a count, then the log's tail with other producers' events
mixed in) publishes exactly the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.bus import MemoryBus
from ridecast.errors import NotFound, ServiceUnavailable
from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.commands import Command, apply
from ridecast.simulator.hosting.clock import MaxClock
from ridecast.simulator.hosting.journal import JournalEntry, JournalStore
from ridecast.simulator.hosting.lease import CLAIMED_STATUS, LeaseStore
from ridecast.simulator.hosting.resume import AlreadyPublished, Progress
from ridecast.simulator.hosting.runner import EventSink, Runner, Status
from ridecast.store.dbclock import db_epoch
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.eventlog import EventLog, NewEvent
from ridecast.store.run_fence import RunFence
from ridecast.store.tables import events as events_table
from ridecast.store.tables import simulator_runs as runs_table
from tests.waiting import eventually_async

START = datetime(2024, 1, 1, 8, tzinfo=UTC)
SMALL = SimulatorSettings(seed=4, vehicles=5, bookings_per_hour=120, duration_s=1200,
                          speed="max", network="straight")
TRIP = {"pickup_lat": 57.70, "pickup_lon": 11.96, "dropoff_lat": 57.72, "dropoff_lon": 11.99,
        "passengers": 1, "max_wait_s": None}


class Sink:
    """Collects what a runner submits, and numbers it as a log would."""

    def __init__(self, first_id: int = 1) -> None:
        self.events: list[dict[str, Any]] = []
        self._next = first_id

    async def __call__(self, simulation_id: int, events: list[dict[str, Any]]) -> list[Any]:
        self.events.extend(events)
        stored = []
        for _ in events:
            stored.append(type("Stored", (), {"event_id": self._next})())
            self._next += 1
        return stored


class Recorder:
    def __init__(self) -> None:
        self.entries: list[JournalEntry] = []

    async def __call__(self, entry: JournalEntry) -> None:
        self.entries.append(entry)


async def _op(runner: Runner, name: str, **args: Any) -> dict[str, Any]:
    command = Command(name, args)
    return await runner.operate(lambda engine: apply(engine, command), command)


async def _reach(runner: Runner, t: float) -> None:
    """Until the running engine has passed simulated time ``t``."""
    async with asyncio.timeout(30):
        while True:
            if runner.engine.now >= t:
                return
            await asyncio.sleep(0)


async def _first_run() -> tuple[list[dict[str, Any]], list[JournalEntry]]:
    """A run at 'max', paused now and then for operations of every kind."""
    sink, recorder = Sink(), Recorder()
    runner = Runner(3, Engine(3, SMALL, START), MaxClock(step_s=45.0), sink, max_batch=40,
                    record=recorder)
    runner.start()
    await runner.pause()
    booked = await _op(runner, "create_booking", **TRIP)
    offer = booked["offer"]
    with pytest.raises(NotFound):
        await _op(runner, "accept_offer", offer_id=987654)  # refused: not journaled
    if offer is not None:
        await _op(runner, "accept_offer", offer_id=offer["id"])
    await runner.resume()
    await _reach(runner, 300.0)
    await runner.pause()
    await _op(runner, "set_vehicle_enabled", vehicle_id=2, enabled=False)
    await _op(runner, "push_position", vehicle_id=3, lat=57.71, lon=11.97, bearing=None,
              speed=None)
    await _op(runner, "create_booking", **TRIP)
    await runner.resume()
    await _reach(runner, 700.0)
    await runner.pause()
    await _op(runner, "set_vehicle_enabled", vehicle_id=2, enabled=True)
    await runner.resume()
    async with asyncio.timeout(60):
        await runner.wait_finished()
    assert runner.status is Status.FINISHED
    return sink.events, recorder.entries


async def _replayed(entries: list[JournalEntry], published: AlreadyPublished | None = None,
                    ) -> tuple[list[dict[str, Any]], Runner]:
    sink = Sink()
    runner = Runner(3, Engine(3, SMALL, START), MaxClock(step_s=45.0), sink, max_batch=40,
                    replay=entries, published=published)
    runner.start()
    async with asyncio.timeout(60):
        await runner.wait_finished()
    return sink.events, runner


async def test_replaying_the_journal_gives_the_same_events() -> None:
    """Every accepted operation is journaled in order with its simulated time, none of the
    refused; the journal replayed in other steps gives the run's events exactly."""
    events, entries = await _first_run()
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    assert len(entries) >= 5
    assert [e.sim_t for e in entries] == sorted(e.sim_t for e in entries)
    assert all(e.command.name != "accept_offer" or e.command.args["offer_id"] != 987654
               for e in entries)
    again, runner = await _replayed(entries)
    assert again == events
    assert runner.progress.count == len(events)
    # Without its journal the run is another run: the journal is what made it.
    without, _ = await _replayed([])
    assert without != events


async def test_a_rebuilt_run_publishes_only_what_was_not_published() -> None:
    """Told that k events were committed, the rebuilt run publishes events[k:]; told less
    (a crash after the last record), it finds the rest in the log's tail, among events
    other producers sent, and publishes from the first one not there."""
    events, entries = await _first_run()
    k = len(events) // 2
    rest, runner = await _replayed(entries, AlreadyPublished(Progress(k, 500)))
    assert rest == events[k:]
    assert runner.progress.count == len(events)
    foreign = {"simulation_id": 3, "agent_type": "operator", "message_type": "bookings",
               "data": {"bookings": []}, "current_sim_ts": "2024-01-01T08:00:00.000+00:00"}
    tail: list[tuple[int, dict[str, Any]]] = []
    for i, event in enumerate(events[k - 30:k]):
        tail.append((1000 + 2 * i, {**event, "server_ts": "2026-01-01T00:00:00+00:00"}))
        tail.append((1001 + 2 * i, {**foreign, "server_ts": "2026-01-01T00:00:00+00:00"}))
    published = AlreadyPublished(Progress(k - 30, 999), tail)
    rest, runner = await _replayed(entries, published)
    assert rest == events[k:]
    assert runner.progress.count == len(events)
    assert published.last_id == tail[-2][0]


async def test_journal_store_keeps_times_exactly(tmp_path: Path) -> None:
    """Entries come back in order, with the exact float time and the command's arguments;
    forgetting keeps the current run's journal when asked."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'j.db'}"
    await upgrade(url)
    engine = create_engine(url)
    try:
        store = JournalStore(engine)
        t = 123.45678901234567
        first = JournalEntry(1, t, Command("create_booking", TRIP))
        second = JournalEntry(2, t + 1e-9, Command("accept_offer", {"offer_id": 3}))
        await store.append(9, "run-a", first)
        await store.append(9, "run-a", second)
        await store.append(9, "run-b", first)
        assert await store.read("run-a") == [first, second]
        await store.forget(9, keep_run="run-a")
        assert await store.read("run-b") == []
        assert len(await store.read("run-a")) == 2
    finally:
        await engine.dispose()


async def _paused_with_one_entry(store: JournalStore, sink: Sink) -> Runner:
    """A paused runner of simulation 3 journaling into ``store`` (run "run"), one operation
    (vehicle 1 disabled) accepted."""
    runner = Runner(3, Engine(3, SMALL, START), MaxClock(step_s=45.0), sink,
                    record=lambda entry: store.append(3, "run", entry))
    runner.start()
    await runner.pause()
    await _op(runner, "set_vehicle_enabled", vehicle_id=1, enabled=False)
    return runner


async def test_a_journal_that_cannot_be_written_gives_the_run_up(tmp_path: Path) -> None:
    """The store refuses the entry (its table is gone): the operation answers 503, its
    events are not published, and the runner gives the run up (to be rebuilt from its
    journal, where the operation is not) without marking it stopped: the run goes on."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'j.db'}"
    await upgrade(url)
    engine = create_engine(url)
    try:
        store = JournalStore(engine)
        sink = Sink()
        runner = await _paused_with_one_entry(store, sink)
        assert len(await store.read("run")) == 1
        async with engine.begin() as conn:
            await conn.exec_driver_sql("DROP TABLE simulator_journal")
        published = len(sink.events)
        with pytest.raises(ServiceUnavailable):
            await _op(runner, "set_vehicle_enabled", vehicle_id=2, enabled=False)
        assert runner.status is Status.PAUSED and runner.error is None
        assert "journal" in (runner.lost or "")
        with pytest.raises(ServiceUnavailable):  # nothing more runs here
            await _op(runner, "set_vehicle_enabled", vehicle_id=3, enabled=False)
        assert not any(e["message_type"] == "vehicle_use" and e["data"]["vehicle_id"] == 2
                       for e in sink.events[published:])
    finally:
        await engine.dispose()


async def test_an_owner_that_lost_its_lease_journals_and_publishes_nothing(
        tmp_path: Path) -> None:
    """Another node took the run: this node's next operation is refused by the journal's
    lease fence (503), publishes nothing, and the runner gives the run up here."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'j.db'}"
    await upgrade(url)
    engine = create_engine(url)
    try:
        leases = LeaseStore(engine)
        assert await leases.acquire(3, "A", 30, CLAIMED_STATUS)
        store = JournalStore(engine, owner="A")
        sink = Sink()
        runner = await _paused_with_one_entry(store, sink)
        assert await leases.hand_over(3, "A", {"status": "paused"}, {})
        assert await leases.acquire(3, "B", 30, CLAIMED_STATUS)  # B has the run now
        published = len(sink.events)
        with pytest.raises(ServiceUnavailable, match="lease"):
            await _op(runner, "set_vehicle_enabled", vehicle_id=2, enabled=False)
        assert "lease" in (runner.lost or "")
        assert [entry.seq for entry in await store.read("run")] == [1]
        assert sink.events[published:] == []
        await runner.close()
    finally:
        await engine.dispose()


async def test_an_owner_that_lost_its_lease_stores_none_of_its_events(tmp_path: Path) -> None:
    """The runner's events go to the event log fenced by the owner's lease (as the app wires
    it): once another node holds the run, the next step's events are refused whole, none
    is stored, and the runner gives the run up here without marking it stopped."""
    async with _fenced_log(tmp_path) as (engine, leases, fenced):
        runner = Runner(3, Engine(3, SMALL, START), MaxClock(step_s=45.0), fenced)
        runner.start()
        await eventually_async(lambda: runner.progress.count > 0, timeout=60,
                               what="the first step's events stored under A's lease")
        await runner.pause()
        assert await leases.hand_over(3, "A", {"status": "paused"}, {})
        assert await leases.acquire(3, "B", 30, CLAIMED_STATUS)  # B has the run now
        # What A committed while it held the lease (a step in flight at the pause
        # included); nothing may be added from here on.
        stored = await _stored_count(engine, 3)
        await runner.resume()
        await eventually_async(lambda: runner.lost is not None, timeout=30,
                               what="the runner gave the run up")
        assert "lease" in (runner.lost or "")
        assert runner.status is not Status.STOPPED
        assert await _stored_count(engine, 3) == stored
        await runner.close()


@contextlib.asynccontextmanager
async def _fenced_log(
        tmp_path: Path) -> AsyncIterator[tuple[AsyncEngine, LeaseStore, EventSink]]:
    """A store whose run 3 node A leases, and a sink of A's that writes a run's events
    to the event log fenced by A's lease, as the app wires it."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'j.db'}"
    await upgrade(url)
    engine = create_engine(url)
    event_log = EventLog(engine, MemoryBus())
    await event_log.start()
    try:
        leases = LeaseStore(engine)
        assert await leases.acquire(3, "A", 30, CLAIMED_STATUS)

        async def fenced(simulation_id: int, events: list[dict[str, Any]]) -> object:
            return await event_log.append(
                [NewEvent(simulation_id, 1, 1, event["message_type"], orjson.dumps(event))
                 for event in events], fence=RunFence(simulation_id, "A"))

        yield engine, leases, fenced
    finally:
        await event_log.close()
        await engine.dispose()


async def _stored_count(engine: AsyncEngine, simulation_id: int) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(events_table)
                                       .where(events_table.c.simulation_id == simulation_id)))
                   .scalar_one())


async def test_an_owner_whose_lease_lapsed_unclaimed_renews_it_and_goes_on(
        tmp_path: Path) -> None:
    """A lease that lapsed (its renewals late under load) while no other node took the run
    is still this node's: the fenced write is refused, the runner renews the lease
    (``reclaim``, as the cluster host wires it) and writes again, and the run goes on. Once
    another node holds the run, renewing fails and the runner gives the run up."""
    async with _fenced_log(tmp_path) as (engine, leases, fenced):
        reclaims: list[bool] = []

        async def reclaim() -> bool:
            owned = 3 in await leases.renew("A", {3}, 30)
            reclaims.append(owned)
            return owned

        # A day: the run must outlast both halves of the test.
        long_run = SMALL.model_copy(update={"duration_s": 86400.0})
        runner = Runner(3, Engine(3, long_run, START), MaxClock(step_s=45.0), fenced,
                        reclaim=reclaim)
        runner.start()
        await eventually_async(lambda: runner.progress.count > 0, timeout=60,
                               what="the first step's events stored under A's lease")
        await runner.pause()
        await _lapse(engine, 3)  # still A's, and nobody took it
        stored = await _stored_count(engine, 3)
        count = runner.progress.count
        await runner.resume()
        await eventually_async(lambda: runner.progress.count > count, timeout=60,
                               what="more events stored after the lapse")
        assert reclaims[:1] == [True] and runner.lost is None
        assert await _stored_count(engine, 3) > stored
        # Now another node takes the run: renewing fails, and the runner gives it up.
        await runner.pause()
        # What a takeover's claim leaves, in one write (a step of A's still in flight at
        # the pause may renew A's lease if it comes between a lapse and B's claim, rightly).
        await _lapse(engine, 3, owner="B")
        stored = await _stored_count(engine, 3)  # B's now: nothing of A's may be added
        await runner.resume()
        await eventually_async(lambda: runner.lost is not None, timeout=30,
                               what="the runner gave the run up")
        assert reclaims[-1] is False
        assert await _stored_count(engine, 3) == stored
        await runner.close()


async def _lapse(engine: AsyncEngine, simulation_id: int, owner: str | None = None) -> None:
    """End the run's lease in the store, its owner unchanged; or give it to ``owner`` with
    a live lease."""
    values: dict[str, Any] = {"lease_until": 0.0}
    if owner is not None:
        values = {"owner_node": owner, "lease_until": db_epoch() + 30}
    async with engine.begin() as conn:
        await conn.execute(update(runs_table).where(runs_table.c.simulation_id == simulation_id)
                           .values(**values))
