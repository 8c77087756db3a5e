"""Drives one engine with a clock and hands its events to a sink, in order.

The runner's loop advances the engine to the clock's target, submits what came out and waits
for the next timer. One submission may be in flight while the engine computes the next step
(so the commit of step k overlaps the computation of step k+1); it is awaited before the
next one starts, so submissions stay in order and at most one step's events are unsettled.
Operations go through ``operate``, which takes the same lock and first settles the step in
flight: the engine catches up with the clock, then the operation runs, and the events of both
are submitted in the order they happened. A submission that fails stops the run with its
error: the engine has moved on, and a run with a gap in its events must not go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from ..errors import Conflict, RidecastError
from .clock import Clock, MaxClock
from .engine import Engine
from .kpis import KpiCache
from .operations import Result

log = logging.getLogger(__name__)


class EventSink(Protocol):
    """Where events go; the app wires it to ``Ingest.submit``."""

    async def __call__(self, simulation_id: int, events: list[dict[str, Any]], /) -> object:
        ...


class Status(StrEnum):
    """The simulator's state, as ``GET .../simulator`` reports it."""

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    STOPPED = "stopped"
    # Never a runner's own state: a run whose owning node went away (see simulator/lease.py).
    INTERRUPTED = "interrupted"


class Runner:
    """One simulation's engine, clock and loop task."""

    def __init__(self, simulation_id: int, engine: Engine, clock: Clock, sink: EventSink,
                 max_batch: int = 1000) -> None:
        self.simulation_id = simulation_id
        self.engine = engine
        self.clock = clock
        self.sink = sink
        self.max_batch = max_batch
        self.status = Status.IDLE
        self.error: str | None = None
        self.lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # The step whose events are being submitted while the engine computes the next.
        self._inflight: asyncio.Task[None] | None = None
        self._operations = 0
        self._kpis = KpiCache()

    async def _submit(self, events: list[dict[str, Any]]) -> None:
        # The ingest takes bounded batches; order is kept across them.
        for i in range(0, len(events), self.max_batch):
            await self.sink(self.simulation_id, events[i : i + self.max_batch])

    async def _settle(self) -> None:
        """Wait for the submission in flight; a failure stops the run and is raised."""
        task, self._inflight = self._inflight, None
        if task is None:
            return
        try:
            await task
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self.status in (Status.RUNNING, Status.PAUSED):
                log.error("simulator of simulation %s stopped: submitting its events failed "
                          "(%s)", self.simulation_id, type(exc).__name__)
                self.error = f"{type(exc).__name__}: {exc}"
                self.status = Status.STOPPED
            raise

    def kpis(self) -> dict[str, Any]:
        """The run's KPIs; recomputed when the run moved, at most once a second while it
        runs as fast as it can, and less often when computing them takes long (see
        ``KpiCache``)."""
        running = self.status is Status.RUNNING
        return self._kpis.get(self.engine, self._operations, running=running,
                              throttle=running and isinstance(self.clock, MaxClock))

    def start(self) -> None:
        self.status = Status.RUNNING
        self._task = asyncio.create_task(self._run(), name=f"simulator-{self.simulation_id}")

    async def _run(self) -> None:
        engine = self.engine
        try:
            while True:
                async with self.lock:
                    if self.status is Status.RUNNING:
                        events = engine.advance(self.clock.target(engine.now))
                        await self._settle()
                        if events:
                            self._inflight = asyncio.create_task(
                                self._submit(events),
                                name=f"simulator-{self.simulation_id}-submit")
                        if engine.finished:
                            await self._settle()
                            self.status = Status.FINISHED
                            return
                await self.clock.wait(engine.now, engine.next_t)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self.status is not Status.STOPPED:  # else _settle has said why
                log.exception("simulator of simulation %s failed", self.simulation_id)
                self.error = f"{type(exc).__name__}: {exc}"
                self.status = Status.STOPPED

    async def pause(self) -> None:
        async with self.lock:
            if self.status is not Status.RUNNING:
                raise Conflict(f"the simulator is {self.status.value}, not running",
                               code="invalid_state")
            self.clock.pause()
            self.status = Status.PAUSED

    async def resume(self) -> None:
        async with self.lock:
            if self.status is not Status.PAUSED:
                raise Conflict(f"the simulator is {self.status.value}, not paused",
                               code="invalid_state")
            self.clock.resume()
            self.status = Status.RUNNING

    async def stop(self) -> None:
        if self.status not in (Status.RUNNING, Status.PAUSED):
            raise Conflict(f"the simulator is {self.status.value}, not running or paused",
                           code="invalid_state")
        await self.close()
        self.status = Status.STOPPED

    async def close(self) -> None:
        """Cancel the loop, after the submission in flight has settled (the events the
        engine produced are never dropped)."""
        if self._task is not None:
            async with self.lock:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):  # _settle has logged it and set the error
            await self._settle()

    async def operate(self, op: Callable[[Engine], Result]) -> dict[str, Any]:
        """Run an operation at the current simulated time; its events, or its error."""
        async with self.lock:
            if self.status not in (Status.RUNNING, Status.PAUSED):
                raise Conflict(f"the simulator is {self.status.value}: start it first",
                               code="invalid_state")
            await self._settle()
            self._operations += 1
            caught_up = self.engine.advance(self.clock.op_time(self.engine.now))
            try:
                body, events = op(self.engine)
            except RidecastError:
                if caught_up:
                    await self._submit(caught_up)
                raise
            await self._submit(caught_up + events)
        self.clock.wake()  # the operation may have set a timer due before the next one
        return body

    async def wait_finished(self) -> None:
        """Until the loop ends (tests and the bench; wrap in ``asyncio.timeout``)."""
        if self._task is not None:
            await asyncio.shield(self._task)
