"""Drives one engine with a clock and hands its events to a sink, in order.

The runner's loop advances the engine to the clock's target, submits what came out and waits
for the next timer. One submission may be in flight while the engine computes the next step
(so the commit of step k overlaps the computation of step k+1); it is awaited before the
next one starts, so submissions stay in order and at most one step's events are unsettled.
Operations go through ``operate``, which takes the same lock and first settles the step in
flight: the engine catches up with the clock, then the operation runs, and the events of both
are submitted in the order they happened.

A submission that fails because the store does not answer is tried again with back-off
(``backoff.py``) for as long as the run's lease holds (``holds``); before each new attempt
the event log is read after the last committed event, so that a batch whose commit went
through unseen is not written twice. When the lease is gone the runner gives the run up
(``lost``): it stops here without a word in the run's status, and the node that takes the
run over continues it from the journal. A write refused by the lease's fence because the
lease lapsed (a renewal late under load) while no other node took the run is not the lease
gone: the runner renews it (``reclaim``) and writes again, once. A submission refused for
good (not a store fault) stops the run with its error: a run with a gap in its events must
not go on.

An operation either takes effect whole or not at all. It is checked against the engine
before it changes anything (``core/operations.py``); if it fails anyway, or its journal
entry cannot be written, the engine may hold a change its journal does not: the runner
gives the run up (``lost``) and the host rebuilds it from its spec and journal, in which
the operation is not. The client gets an error, and nothing of the operation is published.

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

The engine is an ``EngineHandle`` (``engine_handle.py``): in an engine process of its own
under ``ridecast serve``, so this loop only awaits its answers, and in process for the tests.
A run at ``speed: "max"`` asks for steps of at most ``slice_s`` CPU seconds, which its
engine process serves in turns with the other runs (``slices.py``), and publishes through
the process's ``PublishLane`` (``publish_lane.py``). A run that finishes or
stops frees its engine and keeps its time and last KPIs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from enum import StrEnum
from functools import partial
from itertools import takewhile
from typing import Any, Protocol, TypeVar

from ...errors import BadRequest, Conflict, RidecastError, ServiceUnavailable
from ...store.run_fence import LeaseLost
from ..core.commands import Command
from ..core.engine import Engine
from ..core.operations import Result
from .backoff import Backoff, transient
from .clock import Clock, MaxClock
from .engine_handle import EngineHandle, EngineLost, JournalDiverged, LocalEngine
from .journal import JournalEntry
from .publish_lane import PublishLane
from .resume import AlreadyPublished, EventTail, Progress
from .snapshots import Checkpointer

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_STEP_S = 60.0
"""Most simulated seconds the engine advances between two turns of the event loop."""
CATCH_UP_STEP_S = 10.0
"""The same while a taken-over run catches up: a busy run's minute holds the loop for about
a second, and the node answers its other requests meanwhile."""

LANE_BATCH = 200
"""Most events of one batch a run at 'max' publishes through the lane."""


class Recorder(Protocol):
    """Writes a journal entry of the run; committed when it returns."""

    async def __call__(self, entry: JournalEntry, /) -> None:
        ...


DEFAULT_BACKOFF = Backoff()
"""Delays between attempts at a store write of the run."""
JOURNAL_RETRY_S = 1.0
"""Longest time an operation's journal write is tried again before it answers 503 (the
client is waiting for its answer)."""


class RunLost(ServiceUnavailable):
    """The runner gave its run up (see ``Runner.lost``); the run goes on where it is rebuilt."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="simulator_owner_unreachable", retry_after=1)


__all__ = ["EventSink", "JournalDiverged", "Recorder", "RunLost", "Runner", "Status"]


class EventSink(Protocol):
    """Where events go; the app wires it to ``Ingest.submit``."""

    async def __call__(self, simulation_id: int, events: list[dict[str, Any]], /) -> object:
        ...


Throttle = Callable[[int], Awaitable[None]]
"""Waits until the run may publish ``[0]`` more events (its organisation's events per
second: ``limits/quota_service.py``); it slows the run, it never drops an event."""


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

    def __init__(self, simulation_id: int, engine: Engine | EngineHandle, clock: Clock,
                 sink: EventSink, max_batch: int = 1000, *, record: Recorder | None = None,
                 replay: Sequence[JournalEntry] = (),
                 published: AlreadyPublished | None = None, replay_until: float = 0.0,
                 throttle: Throttle | None = None,
                 holds: Callable[[], bool] | None = None,
                 reclaim: Callable[[], Awaitable[bool]] | None = None,
                 tail: EventTail | None = None,
                 backoff: Backoff = DEFAULT_BACKOFF,
                 slice_s: float | None = None, lane: PublishLane | None = None,
                 group: str = "", next_seq: int | None = None,
                 checkpoint: Checkpointer | None = None) -> None:
        self.simulation_id = simulation_id
        self.engine: EngineHandle = (LocalEngine(engine) if isinstance(engine, Engine)
                                     else engine)
        # CPU seconds a step of a run at 'max' may take in its engine process.
        self.slice_s = slice_s if isinstance(clock, MaxClock) else None
        self.lane = lane if isinstance(clock, MaxClock) else None
        self.group = group  # who this run shares the lane with fairly (its organisation)
        self.clock = clock
        self.sink = sink
        self.max_batch = max_batch
        self.throttle = throttle
        self.status = Status.IDLE
        self.error: str | None = None
        self.lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # The step whose events are being submitted while the engine computes the next.
        self._inflight: asyncio.Task[None] | None = None
        self._operations = 0
        self._kpis: dict[str, Any] = {}
        self._kpi_task: asyncio.Task[None] | None = None
        self._record = record
        self._replay: deque[JournalEntry] = deque(replay)
        # The next journal entry's seq (after a snapshot, the journal may have no entries
        # left to replay but did have some before it).
        self._next_seq = (replay[-1].seq + 1) if replay else (next_seq or 1)
        self._checkpoint = checkpoint
        self._published = published or AlreadyPublished(Progress())
        # Where the previous owner's clock was: the run catches up to there even paused.
        self.replay_until = replay_until
        # A run taken over, until it has caught up with its clock (``catching_up``).
        self._adopting = bool(replay) or not self._published.done or replay_until > 0
        # Whether the clock was more than a step ahead of the engine at the last step.
        self._lagging = False
        # How far the run's events are committed (count and last event log id).
        self.progress = Progress(self._published.count, self._published.last_id)
        # Whether the run's lease still holds: store writes are retried while it does.
        # None: never retried (a runner without a host).
        self._holds = holds
        # Renews the run's lease when this node still owns it (True), after a fenced write
        # was refused because the lease had lapsed; None: a refusal gives the run up.
        self._reclaim = reclaim
        self._tail = tail
        self._backoff = backoff
        # Why this runner gave its run up (see the module docstring); its status is left as
        # it was, for the run goes on elsewhere.
        self.lost: str | None = None

    @property
    def catching_up(self) -> bool:
        """A taken-over run still replaying its journal or what was already published, or
        whose engine has yet to reach its clock: it is caught up once its engine stands
        within one step of where the run's clock says it should be, and stays so."""
        if not self._adopting or self.status not in (Status.RUNNING, Status.PAUSED):
            return False
        if (self._replay or not self._published.done or self.engine.now < self.replay_until
                or self._lagging):
            return True
        self._adopting = False
        return False

    @property
    def behind_s(self) -> float:
        """Simulated seconds the engine has yet to compute to stand where the run should."""
        goal = self.replay_until
        if self.status is Status.RUNNING and not isinstance(self.clock, MaxClock):
            goal = max(goal, self.clock.target(self.engine.now))
        return max(0.0, goal - self.engine.now)

    async def _advance(self, until: float,
                       budget_s: float | None = None) -> list[dict[str, Any]]:
        """The engine's events up to ``until`` (or as far as ``budget_s`` of CPU went), the
        journal's operations applied on the way."""
        replay = self._replay
        # The journal is in simulated-time order: only its head is due.
        due = list(takewhile(lambda entry: entry.sim_t <= until, replay)) if replay else []
        step = await self.engine.advance(until, due, budget_s=budget_s)
        for _ in range(step.applied):
            replay.popleft()
        self._operations += step.applied
        return step.events

    async def _submit(self, events: list[dict[str, Any]]) -> None:
        if self._checkpoint is not None:
            self._checkpoint.produced(len(events))
        published = self._published
        if not published.done:
            events = published.filter(events)
            self.progress = Progress(published.count, published.last_id)
        # The ingest takes bounded batches; order is kept across them. Through the lane,
        # smaller ones: a batch holds the event loop while it is stamped and serialised,
        # and a request that arrives meanwhile waits for it.
        size = self.max_batch if self.lane is None else min(self.max_batch, LANE_BATCH)
        for i in range(0, len(events), size):
            await self._store(events[i : i + size])

    async def _store(self, chunk: list[dict[str, Any]]) -> None:
        """Commit ``chunk``, after its organisation's throttle let it through, trying both
        again while the store does not answer and the lease holds; each retry first drops
        what the failed attempt committed after all."""
        delays = self._backoff.delays()
        failures = 0
        # The throttle reads the store too (the run's organisation): its outage is the
        # store's, retried like a failed write, never an end of the run.
        throttled = self.throttle is None
        while True:
            try:
                if not throttled:
                    assert self.throttle is not None
                    await self.throttle(len(chunk))
                    throttled = True
                if failures:
                    chunk = await self._not_yet_stored(chunk)
                    if not chunk:
                        return
                stored = await self._fenced(partial(self._sink, chunk))
                break
            except LeaseLost as exc:
                # Stalled past the lease (the sink's write is fenced by it): another node
                # has the run, or may take it now, and publishes these events from the
                # journal it reads.
                self.give_up(str(exc))
                raise RunLost("this node no longer holds the run's lease; its events are "
                              "published by the node that rebuilds it") from exc
            except Exception as exc:
                if not transient(exc) or self._holds is None:
                    raise
                if not self._holds():
                    raise RunLost("this node lost the run's lease while the store did not "
                                  "answer") from exc
                if failures == 0:
                    log.warning("simulator of simulation %s: storing its events failed (%s); "
                                "trying again while its lease holds", self.simulation_id,
                                type(exc).__name__)
                failures += 1
                await asyncio.sleep(next(delays))
        if failures:
            log.info("simulator of simulation %s: its events are stored again after %d "
                     "failed attempts", self.simulation_id, failures)
        last = stored[-1] if isinstance(stored, list) and stored else None
        last_id = getattr(last, "event_id", None)
        self.progress = Progress(self.progress.count + len(chunk),
                                 last_id if isinstance(last_id, int)
                                 else self.progress.last_id)

    async def _sink(self, chunk: list[dict[str, Any]]) -> object:
        """One attempt at handing ``chunk`` to the sink, in the lane's turn when the run
        publishes through one."""
        if self.lane is None:
            return await self.sink(self.simulation_id, chunk)
        async with self.lane.turn(self.group):
            return await self.sink(self.simulation_id, chunk)

    async def _not_yet_stored(self, chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The suffix of ``chunk`` the event log does not hold after the last committed
        event (a commit can succeed while its answer is lost with the connection)."""
        if self._tail is None:
            return chunk
        tail = await self._tail.after(self.simulation_id, self.progress.last_id or 0)
        if not tail:
            return chunk
        found = AlreadyPublished(Progress(0, self.progress.last_id), tail)
        rest = found.filter(chunk)
        if found.count:
            self.progress = Progress(self.progress.count + found.count, found.last_id)
        return rest

    async def _settle(self) -> None:
        """Wait for the submission in flight; a failure stops the run and is raised."""
        task, self._inflight = self._inflight, None
        if task is None:
            return
        try:
            await task
        except asyncio.CancelledError:
            raise
        except RunLost as exc:
            self.give_up(exc.message)
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
        await checkpoint.take(self.engine, self._next_seq - 1, self.progress)

    def kpis(self) -> dict[str, Any]:
        """The run's KPIs as of the last ``refresh_kpis``."""
        return self._kpis

    async def refresh_kpis(self, wait_s: float | None = None) -> dict[str, Any]:
        """Ask the engine for the run's KPIs; recomputed when the run moved, at most once a
        second while it runs as fast as it can, and less often when computing them takes
        long (see ``KpiCache``). Waits at most ``wait_s`` (None: until they come): an
        engine process busy elsewhere must not hold a lease renewal or a status request;
        the answer still lands in the cache when it comes. A freed engine's are the last."""
        task = self._kpi_task
        if task is None or task.done():
            task = self._kpi_task = asyncio.create_task(
                self._fetch_kpis(), name=f"simulator-{self.simulation_id}-kpis")
        if wait_s is None:
            await asyncio.shield(task)
        elif wait_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), wait_s)
        return self._kpis

    async def _fetch_kpis(self, final: bool = False) -> None:
        running = self.status is Status.RUNNING and not final
        # A gone engine keeps the last KPIs; its run's loop reports why it is gone.
        with contextlib.suppress(EngineLost, JournalDiverged, RuntimeError):
            self._kpis = await self.engine.kpis(
                self._operations, running=running,
                throttle=running and isinstance(self.clock, MaxClock),
                settled=not self.catching_up)

    async def _free(self, *, keep_kpis: bool = True) -> None:
        """Keep the final KPIs (unless kept already) and free the engine (the run is over)."""
        if keep_kpis:
            await self._keep_final_kpis()
        with contextlib.suppress(Exception):
            await self.engine.close()

    async def _keep_final_kpis(self) -> None:
        with contextlib.suppress(Exception):
            await self._fetch_kpis(final=True)

    async def _end(self, status: Status) -> None:
        """Say the run is over only once its final KPIs are kept: a status that reads
        ``finished`` never shows the KPIs of a step before the end."""
        await self._keep_final_kpis()
        self.status = status
        await self._free(keep_kpis=False)

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
                        reach = min(target, engine.now + step)
                        # 'max' runs always have a step more to go: they lag nothing.
                        self._lagging = (target > reach
                                         and not isinstance(self.clock, MaxClock))
                        events = await self._advance(reach, self.slice_s)
                        await self._settle()
                        if events:
                            self._inflight = asyncio.create_task(
                                self._submit(events),
                                name=f"simulator-{self.simulation_id}-submit")
                        if engine.finished:
                            await self._settle()
                            await self._end(Status.FINISHED)
                            return
                if self.catching_up:
                    await asyncio.sleep(0)  # catching up: only let the event loop turn
                else:
                    await self.clock.wait(engine.now, engine.next_t)
        except asyncio.CancelledError:
            raise
        except JournalDiverged as exc:
            # Its journal does not rebuild it: it cannot go on, here or anywhere. It says
            # why, accepts stop, and start begins a new run.
            log.error("simulator of simulation %s cannot be resumed: %s", self.simulation_id,
                      exc)
            self.error = f"this run cannot be resumed: {exc}"
            await self._end(Status.INTERRUPTED)
        except EngineLost as exc:
            # The engine's process died: the run goes on where it is rebuilt from its newest
            # snapshot and journal (the cluster host hands it over and takes it again).
            with contextlib.suppress(Exception):
                await self._settle()
            self.give_up(str(exc))
        except Exception as exc:
            if self.lost is not None:
                return  # the run goes on where it is rebuilt; its status stays as it was
            if self.status is not Status.STOPPED:  # else _settle has said why
                log.exception("simulator of simulation %s failed", self.simulation_id)
                self.error = f"{type(exc).__name__}: {exc}"
                self.status = Status.STOPPED
            await self._free()

    @contextlib.asynccontextmanager
    async def _turn(self, wait_s: float | None) -> AsyncIterator[None]:
        """The run's lock, waited for at most ``wait_s`` (None: as long as it takes); past
        that a 503 and the command did nothing (a node that forwarded it gives up waiting
        for the answer soon after: what it answers 503 must not take effect later)."""
        try:
            async with asyncio.timeout(wait_s):
                await self.lock.acquire()
        except TimeoutError:
            raise ServiceUnavailable(
                "the simulator is busy with its step in progress (catching up); the command "
                "did nothing, retry it", code="simulator_owner_unreachable",
                retry_after=1) from None
        try:
            yield
        finally:
            self.lock.release()

    async def pause(self, wait_s: float | None = None) -> None:
        async with self._turn(wait_s):
            if self.status is not Status.RUNNING:
                raise Conflict(f"the simulator is {self.status.value}, not running",
                               code="invalid_state")
            self.clock.pause()
            self.status = Status.PAUSED

    async def resume(self, wait_s: float | None = None) -> None:
        async with self._turn(wait_s):
            if self.status is not Status.PAUSED:
                raise Conflict(f"the simulator is {self.status.value}, not paused",
                               code="invalid_state")
            self.clock.resume()
            self.status = Status.RUNNING

    async def stop(self, wait_s: float | None = None) -> None:
        if self.status is Status.INTERRUPTED:  # a run that cannot go on: acknowledged
            await self.close()
            self.status = Status.STOPPED
            return
        async with self._turn(wait_s):
            if self.status not in (Status.RUNNING, Status.PAUSED):
                raise Conflict(f"the simulator is {self.status.value}, not running or paused",
                               code="invalid_state")
            # Decided within the wait: the loop starts no step after this (the events of
            # the one in flight are still submitted by ``close``).
            if self._task is not None:
                self._task.cancel()
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
        await self._free()

    async def operate(self, op: Callable[[Engine], Result] | None,
                      command: Command | None = None, *,
                      wait_s: float | None = None) -> dict[str, Any]:
        """Run an operation at the current simulated time; its events, or its error.

        ``command``: the operation as data; once the engine accepted it, it is written to
        the journal before anything is published or answered. ``op``: the same as a
        callable, for an engine in this process (an engine process takes only commands).
        ``wait_s``: the longest wait
        for the run's step in progress before a 503 (the operation then did nothing).
        """
        async with self._turn(wait_s):
            return await self._operate(op, command)

    async def _operate(self, op: Callable[[Engine], Result] | None,
                       command: Command | None) -> dict[str, Any]:
        """``operate`` under the run's lock."""
        if self.status not in (Status.RUNNING, Status.PAUSED):
            raise Conflict(f"the simulator is {self.status.value}: start it first",
                           code="invalid_state")
        if self.lost is not None:
            raise RunLost(f"this node gave the run up ({self.lost}); it is being "
                          "rebuilt")
        await self._settle()
        self._operations += 1
        try:
            caught_up = await self._advance(self.clock.op_time(self.engine.now))
        except EngineLost as exc:
            self.give_up(str(exc))
            raise RunLost(f"{exc}; the run is being rebuilt") from exc
        try:
            body, events = await self.engine.apply(op, command)
        except RidecastError:  # refused before it changed anything
            if caught_up:
                await self._submit(caught_up)
            raise
        except EngineLost as exc:  # nothing of the operation is kept: it was not journaled
            await self._abandon(str(exc), caught_up)
            raise RunLost(f"{exc}; the run is being rebuilt") from exc
        except Exception as exc:
            # Not a refusal: the engine may be half changed. Nothing of it is journaled
            # or published; the run is rebuilt from its journal, without it.
            log.exception("simulator of simulation %s: an operation failed; the run is "
                          "rebuilt without it", self.simulation_id)
            await self._abandon(f"an operation failed ({type(exc).__name__})", caught_up)
            raise BadRequest(
                f"the simulator could not apply this operation ({type(exc).__name__}: "
                f"{exc}); the run is unchanged", code="simulator_operation_failed",
            ) from exc
        if command is not None and self._record is not None:
            await self._journal(command, caught_up)
        await self._submit(caught_up + events)
        self.clock.wake()  # the operation may have set a timer due before the next one
        return body

    def give_up(self, why: str) -> None:
        """Stop computing the run here and leave it to be rebuilt (see the module
        docstring); its status is not changed."""
        if self.lost is None:
            log.warning("simulator of simulation %s: this node gives the run up: %s",
                        self.simulation_id, why)
            self.lost = why
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def _abandon(self, why: str, caught_up: list[dict[str, Any]]) -> None:
        """Give the run up after publishing the events the engine produced before the
        failed operation (they follow from the journal, so the rebuilt run skips them)."""
        self.give_up(why)
        with contextlib.suppress(Exception):
            if caught_up:
                await self._submit(caught_up)

    async def _fenced(self, write: Callable[[], Awaitable[T]]) -> T:
        """``write`` (fenced by the run's lease), written once more when it was refused and
        this node renewed the lapsed lease (it still owned the run: nobody took it over
        while a renewal was late under load, or the process paused); ``LeaseLost`` when it
        was refused and the lease is not this node's again."""
        try:
            return await write()
        except LeaseLost:
            if not await self._reclaimed():
                raise
        return await write()

    async def _reclaimed(self) -> bool:
        """Whether this node still owns the run and has renewed its lapsed lease."""
        if self._reclaim is None:
            return False
        try:
            return await self._reclaim()
        except Exception as exc:  # the store does not answer: as if lost
            log.debug("simulator of simulation %s: renewing its lapsed lease: %s",
                      self.simulation_id, exc)
            return False

    async def _journal(self, command: Command, caught_up: list[dict[str, Any]]) -> None:
        """Write the accepted ``command`` to the journal, tried again for a moment while
        the store does not answer; when it cannot be written the engine holds an operation
        its journal does not: the runner gives the run up, to be rebuilt without it."""
        assert self._record is not None
        entry = JournalEntry(self._next_seq, self.engine.now, command)
        delays = self._backoff.delays()
        deadline = asyncio.get_running_loop().time() + JOURNAL_RETRY_S
        record = self._record
        while True:
            try:
                await self._fenced(partial(record, entry))
                break
            except LeaseLost as exc:
                # Another node has the run (or may take it now): what this one computed
                # is the new owner's to publish, from the journal it reads.
                self.give_up(str(exc))
                raise RunLost("this node no longer holds the run's lease; nothing of the "
                              "operation took effect") from exc
            except Exception as exc:
                retry = (transient(exc) and self._holds is not None and self._holds()
                         and asyncio.get_running_loop().time() < deadline)
                if retry:
                    await asyncio.sleep(next(delays))
                    continue
                log.error("simulator of simulation %s: writing its journal failed (%s); the "
                          "run is rebuilt from its journal", self.simulation_id,
                          type(exc).__name__)
                await self._abandon(f"writing its journal failed ({type(exc).__name__})",
                                    caught_up)
                raise RunLost("the operation could not be journaled; nothing of it took "
                              "effect and the run is being rebuilt") from exc
        self._next_seq += 1

    async def wait_finished(self) -> None:
        """Until the loop ends (tests and the bench; wrap in ``asyncio.timeout``)."""
        if self._task is not None:
            await asyncio.shield(self._task)
