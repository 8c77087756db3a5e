"""Drives one engine with a clock and hands its events to a sink, in order.

The runner's loop advances the engine to the clock's target, submits what came out and waits
for the next timer. One submission may be in flight while the engine computes the next step
(so the commit of step k overlaps the computation of step k+1); it is awaited before the
next one starts, so submissions stay in order and at most one step's events are unsettled.
Operations go through ``operate``, which takes the same lock and first settles the step in
flight: the engine catches up with the clock, then the operation runs, and the events of both
are submitted in the order they happened. A submission that fails stops the run with its
error: the engine has moved on, and a run with a gap in its events must not go on.

An accepted operation is written to the run's journal (``record``) before its events are
submitted and before it is answered. A runner that takes a run over is given the journal
(``replay``): its entries are applied at their simulated times as the engine passes them,
and ``AlreadyPublished`` drops the events the previous owner published. A run with a
``Checkpointer`` has its engine's snapshot taken between two steps when one is due
(``snapshots.py``); a runner that takes over from a snapshot is given the engine it holds
and only the journal after it. The engine never
advances more than ``MAX_STEP_S`` (``CATCH_UP_STEP_S`` while catching up) in one go, so
catching up an hour does not hold the event loop (and the events do not depend on the
steps: tests/simulator/test_steps.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any, Protocol

from ...errors import Conflict, RidecastError, ServiceUnavailable
from ..core.commands import Command, apply
from ..core.engine import Engine
from ..core.kpis import KpiCache
from ..core.operations import Result
from .clock import Clock, MaxClock
from .journal import JournalEntry
from .resume import AlreadyPublished, Progress
from .snapshots import Checkpointer

log = logging.getLogger(__name__)

MAX_STEP_S = 60.0
"""Most simulated seconds the engine advances between two turns of the event loop."""
CATCH_UP_STEP_S = 10.0
"""The same while a taken-over run catches up: a busy run's minute holds the loop for about
a second, and the node answers its other requests meanwhile."""


class Recorder(Protocol):
    """Writes a journal entry of the run; committed when it returns."""

    async def __call__(self, entry: JournalEntry, /) -> None:
        ...


class JournalDiverged(RuntimeError):
    """A journaled operation was refused on replay: the rebuilt run is not the run."""


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
    # Never a runner's own state: a run whose owning node went away (see hosting/lease.py).
    INTERRUPTED = "interrupted"


class Runner:
    """One simulation's engine, clock and loop task."""

    def __init__(self, simulation_id: int, engine: Engine, clock: Clock, sink: EventSink,
                 max_batch: int = 1000, *, record: Recorder | None = None,
                 replay: Sequence[JournalEntry] = (),
                 published: AlreadyPublished | None = None, replay_until: float = 0.0,
                 next_seq: int | None = None, checkpoint: Checkpointer | None = None) -> None:
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
        self._record = record
        self._replay: deque[JournalEntry] = deque(replay)
        # The next journal entry's seq (after a snapshot, the journal may have no entries
        # left to replay but did have some before it).
        self._next_seq = (replay[-1].seq + 1) if replay else (next_seq or 1)
        self._checkpoint = checkpoint
        self._published = published or AlreadyPublished(Progress())
        # Where the previous owner's clock was: the run catches up to there even paused.
        self.replay_until = replay_until
        # How far the run's events are committed (count and last event log id).
        self.progress = Progress(self._published.count, self._published.last_id)

    @property
    def catching_up(self) -> bool:
        """A taken-over run still replaying its journal or what was already published."""
        return (bool(self._replay) or not self._published.done
                or self.engine.now < self.replay_until)

    def _advance(self, until: float) -> list[dict[str, Any]]:
        """The engine's events up to ``until``, the journal's operations applied on the way."""
        engine = self.engine
        events: list[dict[str, Any]] = []
        replay = self._replay
        while replay and replay[0].sim_t <= until:
            entry = replay.popleft()
            events += engine.advance(entry.sim_t)
            try:
                _, caused = apply(engine, entry.command)
            except RidecastError as exc:
                raise JournalDiverged(
                    f"journal entry {entry.seq} ({entry.command.name}) was refused on "
                    f"replay: {exc}") from exc
            self._operations += 1
            events += caused
        events += engine.advance(until)
        return events

    async def _submit(self, events: list[dict[str, Any]]) -> None:
        if self._checkpoint is not None:
            self._checkpoint.produced(len(events))
        published = self._published
        if not published.done:
            events = published.filter(events)
            self.progress = Progress(published.count, published.last_id)
        # The ingest takes bounded batches; order is kept across them.
        for i in range(0, len(events), self.max_batch):
            chunk = events[i : i + self.max_batch]
            stored = await self.sink(self.simulation_id, chunk)
            last = stored[-1] if isinstance(stored, list) and stored else None
            last_id = getattr(last, "event_id", None)
            self.progress = Progress(self.progress.count + len(chunk),
                                     last_id if isinstance(last_id, int)
                                     else self.progress.last_id)

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

    async def _maybe_checkpoint(self) -> None:
        """Take the run's snapshot when one is due: between two steps, once every event the
        engine produced so far is committed (so its progress is exact), and never while
        catching up (the journal's seq and the progress are not the run's yet)."""
        checkpoint = self._checkpoint
        if checkpoint is None or self.catching_up or not checkpoint.due(self.engine.now):
            return
        await self._settle()
        checkpoint.take(self.engine, self._next_seq - 1, self.progress)

    def kpis(self) -> dict[str, Any]:
        """The run's KPIs; recomputed when the run moved, at most once a second while it
        runs as fast as it can, and less often when computing them takes long (see
        ``KpiCache``)."""
        running = self.status is Status.RUNNING
        return self._kpis.get(self.engine, self._operations, running=running,
                              throttle=running and isinstance(self.clock, MaxClock),
                              settled=not self.catching_up)

    def start(self) -> None:
        self.status = Status.RUNNING
        self._task = asyncio.create_task(self._run(), name=f"simulator-{self.simulation_id}")

    async def _run(self) -> None:
        engine = self.engine
        try:
            while True:
                async with self.lock:
                    target: float | None = None
                    if self.status is Status.RUNNING:
                        target = self.clock.target(engine.now)
                    elif engine.now < self.replay_until:
                        target = self.replay_until
                    if target is not None:
                        await self._maybe_checkpoint()
                        step = CATCH_UP_STEP_S if self.catching_up else MAX_STEP_S
                        events = self._advance(min(target, engine.now + step))
                        await self._settle()
                        if events:
                            self._inflight = asyncio.create_task(
                                self._submit(events),
                                name=f"simulator-{self.simulation_id}-submit")
                        if engine.finished:
                            await self._settle()
                            self.status = Status.FINISHED
                            return
                if engine.now < self.replay_until:
                    await asyncio.sleep(0)  # catching up: only let the event loop turn
                else:
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
        if self._checkpoint is not None:
            await self._checkpoint.close()

    async def operate(self, op: Callable[[Engine], Result],
                      command: Command | None = None) -> dict[str, Any]:
        """Run an operation at the current simulated time; its events, or its error.

        ``command``: the operation as data; once the engine accepted it, it is written to
        the journal before anything is published or answered.
        """
        async with self.lock:
            if self.status not in (Status.RUNNING, Status.PAUSED):
                raise Conflict(f"the simulator is {self.status.value}: start it first",
                               code="invalid_state")
            await self._settle()
            self._operations += 1
            caught_up = self._advance(self.clock.op_time(self.engine.now))
            try:
                body, events = op(self.engine)
            except RidecastError:
                if caught_up:
                    await self._submit(caught_up)
                raise
            if command is not None and self._record is not None:
                await self._journal(command, caught_up)
            await self._submit(caught_up + events)
        self.clock.wake()  # the operation may have set a timer due before the next one
        return body

    async def _journal(self, command: Command, caught_up: list[dict[str, Any]]) -> None:
        """Write the accepted ``command`` to the journal; when that fails the engine holds
        an operation its journal does not, so the run stops (as when submitting fails)."""
        assert self._record is not None
        entry = JournalEntry(self._next_seq, self.engine.now, command)
        try:
            await self._record(entry)
        except Exception as exc:
            log.error("simulator of simulation %s stopped: writing its journal failed (%s)",
                      self.simulation_id, type(exc).__name__)
            self.error = f"writing the journal failed: {type(exc).__name__}: {exc}"
            self.status = Status.STOPPED
            if self._task is not None:
                self._task.cancel()
            with contextlib.suppress(Exception):
                if caught_up:
                    await self._submit(caught_up)
            raise ServiceUnavailable("the operation could not be journaled; the run stopped",
                                     retry_after=1) from exc
        self._next_seq += 1

    async def wait_finished(self) -> None:
        """Until the loop ends (tests and the bench; wrap in ``asyncio.timeout``)."""
        if self._task is not None:
            await asyncio.shield(self._task)
