"""Operations take effect whole or not at all, and a run outlives what its node cannot do.

Two ``ClusterHost``s in one event loop on a real database (SQLite, then PostgreSQL), with
the journal and an event log of their own: an operation that fails half way through the
engine, or whose journal entry cannot be written, leaves the run as its journal says (it is
rebuilt without it) and nothing of it is journaled or published; a run whose journal does
not rebuild it (``JournalDiverged``) says why, accepts stop, and start begins a new run;
a run taken over says it has caught up only once its clock is reached; controls sent during
its replay are answered within the documented wait; and a node building a run it started
or took over keeps its lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ridecast.bus import MemoryBus
from ridecast.errors import RidecastError, ServiceUnavailable
from ridecast.simulator.core.commands import Command
from ridecast.simulator.core.engine import Engine
from ridecast.simulator.core.operations import Result
from ridecast.simulator.hosting.cluster_host import ClusterHost
from ridecast.simulator.hosting.engine_handle import LocalEngine
from ridecast.simulator.hosting.journal import JournalEntry, JournalStore
from ridecast.simulator.hosting.lease import LeaseStore
from ridecast.simulator.hosting.manager import SimulatorManager
from ridecast.simulator.hosting.runner import CATCH_UP_STEP_S, Runner
from ridecast.store.engine import create_engine, upgrade
from tests.waiting import eventually_async


def _local(runner: Runner) -> Engine:
    """The engine of a runner whose engine computes in this process (no engine pool)."""
    handle = runner.engine
    assert isinstance(handle, LocalEngine)
    return handle.engine


SIM = 11
DATA = {"simulator": {"seed": 3, "vehicles": 3, "speed": 1, "bookings_per_hour": 0,
                      "duration_s": 3600, "vehicle_break_probability": 0,
                      "no_show_probability": 0,
                      "area": {"lat": 52.52, "lon": 13.405, "radius_m": 300}}}
TRIP = {"pickup_lat": 52.52, "pickup_lon": 13.405, "dropoff_lat": 52.525, "dropoff_lon": 13.42,
        "passengers": 1, "max_wait_s": None}


class Log:
    """The event log of the test: what the runs published, with ids (``EventTail`` too)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, dict[str, Any]]] = []

    async def __call__(self, simulation_id: int, events: list[dict[str, Any]]) -> list[Any]:
        first = len(self.events) + 1
        self.events.extend((first + i, e) for i, e in enumerate(events))
        return [SimpleNamespace(event_id=first + i) for i in range(len(events))]

    async def newest_id(self) -> int:
        return len(self.events)

    async def after(self, simulation_id: int, after_id: int) -> list[tuple[int, dict[str, Any]]]:
        return [(i, e) for i, e in self.events if i > after_id]

    def types(self) -> list[str]:
        return [e["message_type"] for _, e in self.events]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'atomic.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


Hosts = Callable[[str], ClusterHost]


@pytest.fixture
async def hosts(database_url: str) -> AsyncIterator[tuple[Hosts, Log, JournalStore]]:
    await upgrade(database_url)
    engine = create_engine(database_url)
    bus = MemoryBus()
    log = Log()
    journal = JournalStore(engine)
    made: list[ClusterHost] = []

    def host(name: str) -> ClusterHost:
        # Each node's entries fenced by its own lease, as ``ridecast serve`` wires them.
        own = JournalStore(engine, owner=name)
        manager = SimulatorManager(log, journal=own, tail=log)
        made.append(ClusterHost(manager, LeaseStore(engine), bus, lease_s=3.0,
                                forward_timeout_s=2.0, node_id=name, journal=own,
                                tail=log))
        made[-1].start_renewing()
        return made[-1]

    try:
        yield host, log, journal
    finally:
        for one in made:
            await one.close()
        await engine.dispose()


def _half_done(engine: Engine) -> Result:
    """An operation that changes the engine, then fails as no refusal does."""
    engine.set_vehicle_enabled(1, False)
    raise OverflowError("a result too large")


async def test_an_operation_that_fails_half_way_leaves_the_run_as_it_was(
        hosts: tuple[Hosts, Log, JournalStore]) -> None:
    """The engine disabled vehicle 1, then failed: the client gets a 400
    ``simulator_operation_failed``; nothing is journaled or published; the run is rebuilt
    from its journal (vehicle 1 enabled, the booking before it there) and goes on, its
    next operation accepted and journaled after the first."""
    make, log, journal = hosts
    a = make("A")
    await a.start(SIM, DATA)
    booked = await a.operate(SIM, Command("create_booking", TRIP))
    run_id = a.manager.specs[SIM].run_id
    published = len(log.events)
    with pytest.raises(RidecastError) as failed:
        await a.manager.operate(SIM, _half_done,
                                Command("set_vehicle_enabled", {"vehicle_id": 1,
                                                                "enabled": False}))
    assert (failed.value.code, failed.value.http_status) == ("simulator_operation_failed", 400)

    async def rebuilt() -> bool:
        runner = a.manager.runners.get(SIM)
        status = await a.status(SIM)
        return (runner is not None and runner.lost is None and status["status"] == "running"
                and status.get("takeover") is None)

    await eventually_async(rebuilt, timeout=30, what="the engine rebuilt")
    engine = _local(a.manager.runners[SIM])
    assert engine.vehicles[1].enabled
    assert booked["booking"]["id"] in engine.bookings
    assert [e.command.name for e in await journal.read(run_id)] == ["create_booking"]
    assert "vehicle_use" not in log.types()[published:]
    await a.operate(SIM, Command("set_vehicle_enabled", {"vehicle_id": 2, "enabled": False}))
    assert [e.seq for e in await journal.read(run_id)] == [1, 2]
    assert log.types().count("bookings") == 1  # the rebuilt run did not publish it again


async def test_a_run_whose_journal_diverges_says_why_and_accepts_stop_and_start(
        hosts: tuple[Hosts, Log, JournalStore]) -> None:
    """A journal entry the engine refuses on replay (``JournalDiverged``): after the
    takeover the run reads ``interrupted`` with the reason, never ``replaying`` answering
    503; stop is accepted and start begins a new run."""
    make, _log, journal = hosts
    a = make("A")
    await a.start(SIM, DATA)
    await a.operate(SIM, Command("create_booking", TRIP))
    run_id = a.manager.specs[SIM].run_id
    await journal.append(SIM, run_id, JournalEntry(
        2, a.manager.runners[SIM].engine.now, Command("cancel_booking", {"booking_id": 987})))
    await a.close()  # hands the run over
    b = make("B")

    async def interrupted() -> bool:
        return (await b.status(SIM))["status"] == "interrupted"

    await eventually_async(interrupted, timeout=30, what="the run interrupted")
    status = await b.status(SIM)
    assert "cannot be resumed" in status["error"] and "cancel_booking" in status["error"]
    assert status.get("takeover") is None
    with pytest.raises(RidecastError) as refused:
        await b.operate(SIM, Command("create_booking", TRIP))
    assert refused.value.http_status == 409
    assert (await b.stop(SIM))["status"] == "stopped"
    assert (await b.start(SIM, DATA))["status"] == "running"
    assert (await b.status(SIM)).get("takeover") is None


async def test_a_journal_write_that_fails_answers_503_and_changes_nothing(
        hosts: tuple[Hosts, Log, JournalStore], database_url: str) -> None:
    """The journal's table refuses writes for a moment: the operation answers 503, its
    events are not published, the run is rebuilt from its journal without it, and once the
    store takes writes again the same operation is accepted."""
    make, log, journal = hosts
    a = make("A")
    await a.start(SIM, DATA)
    run_id = a.manager.specs[SIM].run_id
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                "ALTER TABLE simulator_journal RENAME TO simulator_journal_away")
        published = len(log.events)
        with pytest.raises(ServiceUnavailable):
            await a.operate(SIM, Command("set_vehicle_enabled", {"vehicle_id": 1,
                                                                 "enabled": False}))
        assert "vehicle_use" not in log.types()[published:]
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                "ALTER TABLE simulator_journal_away RENAME TO simulator_journal")
    finally:
        await engine.dispose()

    async def rebuilt() -> bool:
        runner = a.manager.runners.get(SIM)
        return (runner is not None and runner.lost is None
                and (await a.status(SIM)).get("takeover") is None)

    await eventually_async(rebuilt, timeout=30, what="the engine rebuilt")
    assert _local(a.manager.runners[SIM]).vehicles[1].enabled
    await a.operate(SIM, Command("set_vehicle_enabled", {"vehicle_id": 1, "enabled": False}))
    assert [e.seq for e in await journal.read(run_id)] == [1]
    assert log.types()[published:].count("vehicle_use") == 1


BUSY = {"simulator": {"seed": 5, "vehicles": 40, "speed": 120, "bookings_per_hour": 1500,
                      "duration_s": 7200, "network": "straight",
                      "area": {"lat": 52.52, "lon": 13.405, "radius_m": 4000}}}


# The replay races a clock at 120x within the forward timeout: it needs a core of its own,
# which a run beside other xdist workers on 2 cores does not give it.
@pytest.mark.serial
async def test_a_takeover_reads_caught_up_only_once_its_clock_is_reached(
        hosts: tuple[Hosts, Log, JournalStore]) -> None:
    """A busy run at 120x handed over: while it replays, its clock moves on; the new owner
    says ``takeover: null`` only once its engine stands within a step or two of where the
    run's clock says it should be (not merely where the old owner stopped), and an
    operation sent during the replay is answered before a forwarding node would give up
    waiting (the forward timeout)."""
    make, _log, _journal = hosts
    a = make("A")
    await a.start(SIM, BUSY)

    async def far_enough() -> bool:
        runner = a.manager.runners[SIM]
        return runner.engine.now > 400

    await eventually_async(far_enough, timeout=120, what="the run far enough")
    await a.close()  # hands the run over
    b = make("B")

    async def adopted() -> bool:
        return SIM in b.manager.runners

    await eventually_async(adopted, timeout=30, what="the run adopted")
    answer: dict[str, Any] = {}

    async def operate() -> None:
        try:
            async with asyncio.timeout(b.forward_timeout_s):
                answer["body"] = await b.operate(SIM, Command("create_booking", TRIP))
        except ServiceUnavailable as exc:  # the documented 503 while replaying
            answer["error"] = exc.code
        except TimeoutError:
            answer["error"] = "no answer within the forward timeout"

    held = asyncio.create_task(operate())

    async def caught_up() -> list[float] | None:
        status = await b.status(SIM)
        runner = b.manager.runners[SIM]
        if status.get("takeover") is None:
            # Read in the same turn of the event loop as the status: nothing moved.
            return [runner.clock.target(runner.engine.now) - runner.engine.now]
        return None

    lags = await eventually_async(caught_up, timeout=60, step=0.01,
                                  what="the takeover caught up")
    await held
    assert answer.get("error") in (None, "simulator_owner_unreachable"), answer
    assert lags[0] <= 2 * CATCH_UP_STEP_S, lags


async def test_controls_sent_while_a_run_replays_are_answered_within_the_wait(
        hosts: tuple[Hosts, Log, JournalStore]) -> None:
    """Pause and resume sent to a run that is still replaying after a takeover are
    answered within the documented wait (80% of the forward timeout: before a forwarding
    node gives up), done or 503 ``simulator_owner_unreachable``; stop needs no caught-up
    run: it is accepted at once, and ends the replay."""
    make, _log, _journal = hosts
    a = make("A")
    await a.start(SIM, BUSY)

    async def far_enough() -> bool:
        return a.manager.runners[SIM].engine.now > 400

    await eventually_async(far_enough, timeout=120, what="the run far enough")
    await a.close()  # hands the run over
    b = make("B")

    async def replaying() -> bool:
        runner = b.manager.runners.get(SIM)
        return runner is not None and runner.catching_up

    await eventually_async(replaying, timeout=30, what="the run replaying")

    async def control(name: str) -> str:
        """The run's status after ``name``, or the error's code."""
        try:
            async with asyncio.timeout(b.forward_timeout_s):
                body = await getattr(b, name)(SIM)
        except ServiceUnavailable as exc:
            return exc.code
        status: str = body["status"]
        return status

    paused = await control("pause")
    assert paused in ("paused", "simulator_owner_unreachable")
    if paused == "paused":
        assert await control("resume") in ("running", "simulator_owner_unreachable")
    assert b.manager.runners[SIM].catching_up or paused == "paused"
    assert await control("stop") == "stopped"
    status = await b.status(SIM)
    assert status["status"] == "stopped" and status.get("takeover") is None


async def test_a_rebuild_slower_than_the_lease_keeps_the_run_on_one_node(
        hosts: tuple[Hosts, Log, JournalStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """The node that won a takeover renews the run's lease while it rebuilds the run (an
    engine process slow to start, a large snapshot): another node looking for runs to take
    over meanwhile does not take it too."""
    make, _log, _journal = hosts
    a = make("A")
    await a.start(SIM, DATA)
    await a.close()  # hands the run over
    b = make("B")
    adopt = b.manager.adopt

    async def slow_adopt(*args: Any, **kwargs: Any) -> dict[str, Any]:
        await asyncio.sleep(2.5 * b.lease_s)
        return await adopt(*args, **kwargs)

    monkeypatch.setattr(b.manager, "adopt", slow_adopt)

    async def rebuilding() -> bool:
        return SIM in b._taking

    await eventually_async(rebuilding, timeout=30, what="the run being rebuilt")
    c = make("C")

    async def taken_over() -> bool:
        return (await b.status(SIM)).get("takeover") is None and SIM in b.manager.runners

    await eventually_async(taken_over, timeout=30, what="the run taken over")
    assert SIM not in c.manager.runners
    status = await c.status(SIM)
    assert status["owner_node"] == "B" and status["status"] == "running", status


async def test_a_start_slower_than_the_lease_keeps_the_run_on_its_node(
        hosts: tuple[Hosts, Log, JournalStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """The node that claimed a new run renews its lease while it builds the run (an engine
    process slow to start under load). Meanwhile a second start on that node is refused
    (409: its claim of the node's own lease would pass, and its failure would release the
    lease the first start holds), and so is one sent to another node after the first
    lease would have lapsed; the run stays where it started."""
    make, _log, _journal = hosts
    a = make("A")
    b = make("B")
    start = a.manager.start
    building = asyncio.Event()

    async def slow_start(*args: Any, **kwargs: Any) -> dict[str, Any]:
        building.set()
        await asyncio.sleep(2.5 * a.lease_s)
        return await start(*args, **kwargs)

    monkeypatch.setattr(a.manager, "start", slow_start)
    first = asyncio.create_task(a.start(SIM, DATA))
    await building.wait()
    claimed = await a.leases.read(SIM)
    assert claimed is not None and claimed.owner_node == "A"
    with pytest.raises(RidecastError) as caught:
        await a.start(SIM, DATA)
    assert (caught.value.code, caught.value.http_status) == ("invalid_state", 409)
    assert "already starting" in caught.value.message

    async def first_lease_over() -> bool:
        record = await b.leases.read(SIM)
        assert record is not None and claimed is not None
        return record.read_at > claimed.lease_until + 0.5

    await eventually_async(first_lease_over, timeout=2 * a.lease_s, step=0.1,
                           what="the first lease's end")
    assert not first.done()
    with pytest.raises(RidecastError) as caught:
        await b.start(SIM, DATA)
    assert (caught.value.code, caught.value.http_status) == ("invalid_state", 409)
    assert (await first)["status"] == "running"
    assert SIM not in b.manager.runners
    booked = await a.operate(SIM, Command("create_booking", TRIP))
    assert booked["booking"]["id"] in _local(a.manager.runners[SIM]).bookings
    status = await b.status(SIM)
    assert status["owner_node"] == "A" and status["status"] == "running", status


async def test_a_start_sent_while_a_run_is_rebuilt_after_a_takeover_changes_nothing(
        hosts: tuple[Hosts, Log, JournalStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """A start that reaches the node rebuilding a run it took over is the documented 503
    while the run is taken over (``Retry-After``): it neither forgets the run's journal under
    the rebuild nor starts a second run beside it. The rebuilt run keeps its booking."""
    make, _log, journal = hosts
    a = make("A")
    await a.start(SIM, DATA)
    booked = await a.operate(SIM, Command("create_booking", TRIP))
    run_id = a.manager.specs[SIM].run_id
    await a.close()  # hands the run over
    b = make("B")
    adopt = b.manager.adopt
    rebuilding = asyncio.Event()

    async def slow_adopt(*args: Any, **kwargs: Any) -> dict[str, Any]:
        rebuilding.set()
        await asyncio.sleep(b.lease_s)
        return await adopt(*args, **kwargs)

    monkeypatch.setattr(b.manager, "adopt", slow_adopt)
    await rebuilding.wait()
    with pytest.raises(ServiceUnavailable) as caught:
        await b.start(SIM, DATA)
    assert caught.value.code == "simulator_owner_unreachable"
    assert caught.value.retry_after is not None and caught.value.retry_after >= 1
    assert [e.command.name for e in await journal.read(run_id)] == ["create_booking"]

    async def taken_over() -> bool:
        return (await b.status(SIM)).get("takeover") is None and SIM in b.manager.runners

    await eventually_async(taken_over, timeout=30, what="the run taken over")
    assert b.manager.specs[SIM].run_id == run_id
    assert booked["booking"]["id"] in _local(b.manager.runners[SIM]).bookings
