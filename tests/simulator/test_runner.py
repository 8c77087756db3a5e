"""The async layer: runner, clocks and manager, with an in-memory sink."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from ridecast.errors import Conflict, NotFound, ServiceUnavailable
from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.demand import hourly_rates
from ridecast.simulator.hosting.backoff import Backoff
from ridecast.simulator.hosting.clock import MaxClock, WallClock
from ridecast.simulator.hosting.engine_handle import LocalEngine
from ridecast.simulator.hosting.manager import SimulatorManager
from ridecast.simulator.hosting.runner import Runner, Status

START = datetime(2024, 1, 1, 8, tzinfo=UTC)
SMALL = SimulatorSettings(seed=2, vehicles=4, bookings_per_hour=60, duration_s=900, speed="max")


class Sink:
    """Collects what a runner submits."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.batches = 0

    async def __call__(self, simulation_id: int, events: list[dict[str, Any]]) -> None:
        assert simulation_id == 9
        self.batches += 1
        self.events.extend(events)


async def _run_at_max(sink: Sink) -> Runner:
    """A runner at 'max' on ``SMALL``, run to its end (finished or stopped)."""
    runner = Runner(9, Engine(9, SMALL, START), MaxClock(step_s=45.0), sink, max_batch=50)
    runner.start()
    async with asyncio.timeout(20):
        await runner.wait_finished()
    return runner


async def test_max_clock_runs_to_the_same_stream_as_the_engine() -> None:
    """A runner at 'max' submits exactly the engine's stream, in order, and finishes."""
    sink = Sink()
    runner = await _run_at_max(sink)
    assert runner.status is Status.FINISHED
    assert sink.events == Engine(9, SMALL, START).advance(1e9)
    assert sink.batches > 1


async def test_operation_errors_publish_nothing() -> None:
    """A refused operation raises and submits no event of its own."""
    sink = Sink()
    runner = Runner(9, Engine(9, SMALL, START), MaxClock(), sink)
    runner.start()
    await runner.pause()
    await runner.operate(lambda e: ({}, []))  # catch up with the clock first
    before = len(sink.events)
    with pytest.raises(NotFound):
        await runner.operate(lambda e: e.accept_offer(12345))
    with pytest.raises(Conflict):
        await runner.operate(lambda e: e.set_vehicle_enabled(1, True))
    assert len(sink.events) == before
    body = await runner.operate(lambda e: e.set_vehicle_enabled(1, False))
    assert body["vehicle"]["enabled"] is False
    assert sink.events[before]["message_type"] == "vehicle_use"
    await runner.stop()
    assert runner.status is Status.STOPPED
    with pytest.raises(Conflict):
        await runner.operate(lambda e: e.set_vehicle_enabled(1, True))


async def test_paused_clock_stands_still() -> None:
    """While paused, simulated time does not move; on resume it continues from there."""
    now = [100.0]
    clock = WallClock(10.0, monotonic=lambda: now[0])
    now[0] = 101.0
    assert clock.target(0.0) == pytest.approx(10.0)
    clock.pause()
    now[0] = 200.0
    assert clock.target(0.0) == pytest.approx(10.0)
    clock.resume()
    now[0] = 201.0
    assert clock.target(0.0) == pytest.approx(20.0)


async def test_manager_status_and_restart() -> None:
    """The manager reports idle, runs, finishes and can start again."""
    sink = Sink()
    manager = SimulatorManager(sink)
    assert manager.status(9)["status"] == "idle"
    data = {"simulator": SMALL.model_dump(mode="json") | {"start_ts": START.isoformat()}}
    await manager.start(9, data)
    with pytest.raises(Conflict):
        await manager.start(9, data)
    async with asyncio.timeout(20):
        await manager.runners[9].wait_finished()
    status = manager.status(9)
    # 15 minutes at 08:00, where the default demand profile is 1.94 times the mean.
    expected = round(hourly_rates(SMALL)[8] * 0.25)
    assert status["status"] == "finished" and status["kpis"]["bookings"] == expected
    assert status["sim_ts"] > status["started_sim_ts"]
    await manager.start(9, data)
    await manager.close()


class RemoteLikeEngine(LocalEngine):
    """Answers KPIs a turn of the event loop later, as an engine process does over its pipe."""

    async def kpis(self, operations: int, *, running: bool, throttle: bool,
                   settled: bool) -> dict[str, Any]:
        await asyncio.sleep(0)
        return await super().kpis(operations, running=running, throttle=throttle,
                                  settled=settled)


async def test_a_run_reads_finished_only_with_its_final_kpis() -> None:
    """Whoever sees ``finished`` sees the final KPIs, not those of a step before the end:
    a client that reads a finished run's status takes its KPIs as the run's result."""
    runner = Runner(9, RemoteLikeEngine(Engine(9, SMALL, START)), MaxClock(step_s=45.0),
                    Sink())
    runner.start()
    seen: list[dict[str, Any]] = []

    async def watch() -> None:
        # Looks at every turn of the loop: the window it guards is one turn wide.
        while runner.status is Status.RUNNING:  # noqa: ASYNC110
            await asyncio.sleep(0)
        seen.append(dict(runner.kpis()))

    async with asyncio.timeout(20):
        await asyncio.gather(watch(), runner.wait_finished())
    assert runner.status is Status.FINISHED
    final = runner.kpis()
    assert final["bookings"] > 0
    assert seen == [final]


class SlowSink(Sink):
    """Takes a while per batch, counts how many submissions overlap, fails on request."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.active = 0
        self.most_active = 0
        self.fail_at = fail_at
        self.second = asyncio.Event()

    async def __call__(self, simulation_id: int, events: list[dict[str, Any]]) -> None:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await asyncio.sleep(0.002)
            if self.fail_at is not None and self.batches + 1 == self.fail_at:
                raise ConnectionError("store went away")
            await super().__call__(simulation_id, events)
            if self.batches >= 2:
                self.second.set()
        finally:
            self.active -= 1


async def test_a_step_is_submitted_while_the_next_is_computed_in_order() -> None:
    """The step in flight overlaps the engine, never another submission: same stream."""
    sink = SlowSink()
    runner = await _run_at_max(sink)
    assert runner.status is Status.FINISHED
    assert sink.most_active == 1
    assert sink.events == Engine(9, SMALL, START).advance(1e9)


async def test_a_failed_submission_stops_the_run_with_its_error() -> None:
    """Nothing after a failed batch is submitted, the run says why it stopped, and what
    was submitted before is the stream's prefix."""
    sink = SlowSink(fail_at=3)
    runner = await _run_at_max(sink)
    assert runner.status is Status.STOPPED
    assert runner.error == "ConnectionError: store went away"
    assert sink.batches == 2
    assert sink.events == Engine(9, SMALL, START).advance(1e9)[: len(sink.events)]
    with pytest.raises(Conflict):
        await runner.operate(lambda e: e.set_vehicle_enabled(1, False))


async def test_a_throttle_that_meets_a_store_outage_is_tried_again_not_the_end() -> None:
    """The organisation's throttle reads the store; its outage is a store fault like a
    failed write: tried again while the lease holds, and the run finishes whole."""
    outages = [3, 4, 5]  # the calls that fail
    calls = 0

    async def throttle(count: int) -> None:
        nonlocal calls
        calls += 1
        if calls in outages:
            raise ServiceUnavailable("the store did not answer (InterfaceError)")

    sink = Sink()
    runner = Runner(9, Engine(9, SMALL, START), MaxClock(step_s=45.0), sink, max_batch=50,
                    throttle=throttle, holds=lambda: True, backoff=Backoff(first_s=0.001))
    runner.start()
    async with asyncio.timeout(20):
        await runner.wait_finished()
    assert runner.status is Status.FINISHED, runner.error
    assert sink.events == Engine(9, SMALL, START).advance(1e9)
    assert calls > max(outages)


async def test_stop_settles_the_step_in_flight() -> None:
    """Stopping never drops events the engine produced: the last step is submitted."""
    sink = SlowSink()
    engine = Engine(9, SMALL, START)
    runner = Runner(9, engine, MaxClock(step_s=45.0), sink, max_batch=1000)
    runner.start()
    async with asyncio.timeout(20):
        await sink.second.wait()
    await runner.stop()
    assert runner.status is Status.STOPPED
    assert sink.events == Engine(9, SMALL, START).advance(engine.now)
