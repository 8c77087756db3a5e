"""Snapshots: an engine restored from one gives the original's events byte for byte, a run's
snapshots are stored as it runs, and a run resumed from one replays only what came after.

The codec is checked on the straight-line and the road-network travel models, with
operations before and after the snapshot. A run is then taken with snapshots stored in a real
database (SQLite and PostgreSQL); a "crash" some events after a snapshot is resumed from it:
the resumed runner replays only the journal entries after it and drops only the events
published after it, and the stream it adds completes the first run's exactly. A snapshot of
another format is not loaded: the run is replayed from its start, with the same result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest

from ridecast.errors import Conflict, NotFound
from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core import snapshot
from ridecast.simulator.core.commands import Command, apply
from ridecast.simulator.core.kpis import compute
from ridecast.simulator.core.network import NetworkTravel, load_bundled
from ridecast.simulator.core.spec import RunSpec
from ridecast.simulator.hosting.clock import MaxClock
from ridecast.simulator.hosting.engine_handle import LocalEngine
from ridecast.simulator.hosting.journal import JournalStore
from ridecast.simulator.hosting.resume import AlreadyPublished, Progress
from ridecast.simulator.hosting.runner import Runner, Status
from ridecast.simulator.hosting.snapshots import Checkpointer, SnapshotPolicy, restore
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.snapshots import SnapshotStore
from tests.simulator.test_journal import TRIP, Sink, _reach

START = datetime(2024, 1, 1, 8, tzinfo=UTC)
STRAIGHT = SimulatorSettings(seed=4, vehicles=6, bookings_per_hour=240, duration_s=2400,
                             speed="max", network="straight",
                             performance_tracker_enabled=True)
ROADS = SimulatorSettings(seed=5, vehicles=12, bookings_per_hour=150, duration_s=2400,
                          speed="max", network="gothenburg",
                          performance_tracker_enabled=True)
DATA = {"simulator": {"seed": 4, "vehicles": 6, "bookings_per_hour": 240, "duration_s": 2400,
                      "speed": "max", "network": "straight",
                      "start_ts": "2024-01-01T08:00:00+00:00"}}


def _bytes(events: list[dict[str, Any]]) -> bytes:
    return orjson.dumps(events)


def _operate(engine: Engine, name: str, **args: Any) -> list[dict[str, Any]]:
    _, events = apply(engine, Command(name, args))
    return events


@pytest.mark.parametrize("settings", [STRAIGHT, ROADS], ids=["straight", "roads"])
def test_a_restored_engine_gives_the_same_events_byte_for_byte(
        settings: SimulatorSettings) -> None:
    engine = Engine(1, settings, START)
    engine.advance(400.0)
    _operate(engine, "create_booking", **TRIP)
    engine.advance(900.0)
    data = snapshot.dumps(engine)
    assert snapshot.format_version(data) == snapshot.FORMAT_VERSION
    copy = snapshot.loads(data, settings)
    assert copy.now == engine.now
    if isinstance(engine.travel, NetworkTravel):
        # The road network is reattached, not stored: the process's one copy.
        assert isinstance(copy.travel, NetworkTravel)
        assert copy.travel.net is load_bundled("gothenburg")
        assert len(data) < 5_000_000
    original: list[dict[str, Any]] = []
    restored: list[dict[str, Any]] = []
    for until in (950.0, 1300.0, 1700.0):
        original += engine.advance(until)
        restored += copy.advance(until)
        original += _operate(engine, "create_booking", **TRIP)
        restored += _operate(copy, "create_booking", **TRIP)
    original += engine.advance(2400.0)
    restored += copy.advance(2400.0)
    assert len(original) > 200
    assert _bytes(restored) == _bytes(original)


def test_another_format_or_damage_is_refused() -> None:
    engine = Engine(1, STRAIGHT, START)
    engine.advance(300.0)
    data = snapshot.dumps(engine)
    others = [struct.pack(">6sH", snapshot.MAGIC, version) + data[8:]
              for version in (0, snapshot.FORMAT_VERSION + 1)]
    assert [snapshot.format_version(other) for other in others] == [
        0, snapshot.FORMAT_VERSION + 1]
    for bad in (*others, data[:8] + b"not zlib", b"", b"RCSNAP"):
        with pytest.raises(snapshot.SnapshotFormatError):
            snapshot.loads(bad, STRAIGHT)


LONG = SimulatorSettings(seed=6, vehicles=10, bookings_per_hour=400, duration_s=5 * 3600,
                         speed="max", network="straight", demand_profile=[1.0] * 24)


def _kpis(engine: Engine) -> dict[str, Any]:
    """The KPIs but the scheduler's wall-clock decision times."""
    k = compute(engine)
    return {key: value for key, value in k.items() if "decision_ms" not in key}


def _as_format_1(engine: Engine) -> bytes:
    """A snapshot of ``engine`` as format 1 wrote it: every booking held, every scheduler
    decision time in a list, no tally (the engine must have retired nothing yet)."""
    old = snapshot.loads(snapshot.dumps(engine), engine.settings)
    assert old.tally.run.requests == 0
    state = vars(old)
    state["decision_ms"] = [1.0] * old.decisions.count
    for name in ("decisions", "tally", "keep_finished_s", "_ended"):
        del state[name]
    return struct.pack(">6sH", snapshot.MAGIC, 1) + snapshot.dumps(old)[8:]


def test_a_format_1_snapshot_is_migrated() -> None:
    """A snapshot of the format that kept every booking loads: the run goes on with the same
    events and KPIs as the engine it was taken of, and retires the ended bookings later."""
    engine = Engine(1, LONG, START)
    engine.keep_finished_s = float("inf")  # as format 1: every booking held
    engine.advance(3600.0)
    data = _as_format_1(engine)
    assert snapshot.format_version(data) == 1
    copy = snapshot.loads(data, LONG)
    engine.keep_finished_s = copy.keep_finished_s
    assert copy.decisions.count == engine.decisions.count
    assert _kpis(copy) == _kpis(engine)
    original: list[dict[str, Any]] = []
    restored: list[dict[str, Any]] = []
    for until in (4000.0, 8000.0, 5 * 3600.0):
        original += engine.advance(until)
        restored += copy.advance(until)
        original += _operate(engine, "create_booking", **TRIP)
        restored += _operate(copy, "create_booking", **TRIP)
    assert _bytes(restored) == _bytes(original)
    assert _kpis(copy) == _kpis(engine)
    assert copy.tally.run.requests > 0 and len(copy.bookings) < _kpis(copy)["bookings"]


def test_the_engine_and_its_snapshot_do_not_grow_with_ended_bookings() -> None:
    """At a steady demand the engine holds about as many bookings, offers and nodes, and its
    snapshot is about as big, after five hours as after two; the KPIs still count all."""
    engine = Engine(1, LONG, START)
    held: list[int] = []
    sizes: list[int] = []
    created: list[int] = []
    for hours in (2, 5):
        engine.advance(hours * 3600.0)
        held.append(len(engine.bookings) + len(engine.offers) + len(engine.nodes))
        sizes.append(len(snapshot.dumps(engine)))
        created.append(compute(engine)["bookings"])
    assert created[1] > 2.2 * created[0]
    assert held[1] < 1.25 * held[0]
    assert sizes[1] < 1.25 * sizes[0]
    assert len(engine.bookings) < 0.5 * created[1]


def test_a_retired_booking_offer_or_node_answers_as_an_ended_one() -> None:
    """Operations naming a booking, offer or node retired since its booking ended answer 409
    ``invalid_state``, as for an ended booking still held; an id the run never gave, 404."""
    engine = Engine(1, LONG, START)
    engine.advance(3 * 3600.0)
    assert 1 not in engine.bookings and 1 not in engine.offers and 1 not in engine.nodes
    for name, args in (("cancel_booking", {"booking_id": 1}),
                       ("accept_offer", {"offer_id": 1}),
                       ("node_status", {"node_id": 1, "action": "pickup_success"})):
        with pytest.raises(Conflict) as refused:
            apply(engine, Command(name, args))
        assert refused.value.code == "invalid_state"
    with pytest.raises(NotFound):
        apply(engine, Command("cancel_booking", {"booking_id": 10**9}))


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'snap.db'}"
    return str(request.getfixturevalue("pg_url"))


async def _first_run(snapshots: SnapshotStore, journal: JournalStore,
                     spec: RunSpec) -> tuple[Sink, Checkpointer]:
    """The run at 'max' with a snapshot every 300 simulated s, operations on the way."""
    sink = Sink()
    checkpoint = Checkpointer(snapshots, 3, spec.run_id, SnapshotPolicy(every_s=300.0))
    record: Any = lambda entry: journal.append(3, spec.run_id, entry)  # noqa: E731
    runner = Runner(3, spec.engine(3), MaxClock(step_s=45.0), sink, max_batch=40,
                    record=record, checkpoint=checkpoint)
    runner.start()
    for t in (200.0, 700.0, 1100.0, 1500.0):
        await _reach(runner, t)
        await runner.pause()
        command = Command("create_booking", TRIP)
        await runner.operate(partial(apply, command=command), command)
        await runner.resume()
    async with asyncio.timeout(120):
        await runner.wait_finished()
    assert runner.status is Status.FINISHED
    await runner.close()
    return sink, checkpoint


@pytest.mark.parametrize("old_format", [False, True], ids=["current", "older-format"])
async def test_a_run_resumes_from_its_snapshot(store_url: str, old_format: bool) -> None:
    await upgrade(store_url)
    db = create_engine(store_url)
    try:
        snapshots = SnapshotStore(db, keep=2)
        journal = JournalStore(db)
        spec = RunSpec.new(DATA)
        first, checkpoint = await _first_run(snapshots, journal, spec)
        # One due every 300 s over a 2,400 s run (one is skipped while the previous is
        # still being written); only the newest two are kept.
        assert checkpoint.taken >= 2 and checkpoint.taken + checkpoint.skipped >= 6
        assert await snapshots.count(spec.run_id) == 2
        newest = await snapshots.newest(spec.run_id)
        assert newest is not None and newest.event_count > 0
        entries = await journal.read(spec.run_id)
        assert len(entries) == 4
        if old_format:
            stale = struct.pack(">6sH", snapshot.MAGIC, snapshot.FORMAT_VERSION + 1)
            await snapshots.save(dataclasses.replace(newest, body=stale + newest.body[8:]))
        # The owner "crashed" 25 events after its newest snapshot, its progress recorded.
        crashed_at = newest.event_count + 25
        assert crashed_at < len(first.events)
        progress = Progress(crashed_at, crashed_at)  # the sink numbers events from 1
        restored = await restore(snapshots, spec)
        if old_format:
            assert restored is None  # and the run is replayed from its start
            engine, base, after_seq = spec.engine(3), 0, 0
        else:
            assert restored is not None
            assert restored.engine.now == newest.sim_t
            assert restored.progress == Progress(newest.event_count, newest.last_event_id)
            engine, base, after_seq = restored.engine, newest.event_count, newest.journal_seq
        replay = await journal.read(spec.run_id, after_seq=after_seq)
        published = AlreadyPublished(progress, base=base)
        sink = Sink(first_id=crashed_at + 1)
        runner = Runner(3, engine, MaxClock(step_s=45.0), sink, max_batch=40, replay=replay,
                        published=published, next_seq=after_seq + 1)
        runner.start()
        async with asyncio.timeout(120):
            await runner.wait_finished()
        assert runner.status is Status.FINISHED
        if old_format:
            assert len(replay) == len(entries)
            assert published.dropped == crashed_at
        else:
            assert [e.seq for e in replay] == [e.seq for e in entries
                                               if e.seq > newest.journal_seq]
            assert len(replay) < len(entries)
            assert published.dropped == 25
        assert _bytes(first.events[:crashed_at] + sink.events) == _bytes(first.events)
    finally:
        await db.dispose()


async def test_a_snapshot_over_the_size_limit_is_skipped(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'snap.db'}"
    await upgrade(url)
    db = create_engine(url)
    try:
        snapshots = SnapshotStore(db)
        spec = RunSpec.new(DATA)
        checkpoint = Checkpointer(snapshots, 3, spec.run_id,
                                  SnapshotPolicy(every_s=300.0, max_bytes=1024))
        engine = spec.engine(3)
        engine.advance(300.0)
        assert checkpoint.due(engine.now)
        await checkpoint.take(LocalEngine(engine), 0, Progress(10, 10))
        await checkpoint.close()
        assert (checkpoint.taken, checkpoint.skipped) == (0, 1)
        assert await snapshots.newest(spec.run_id) is None
        assert not checkpoint.due(engine.now)  # the next one is due a period later
    finally:
        await db.dispose()
