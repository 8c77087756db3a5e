"""How a runner drives its engine: an awaitable handle, in this process or in another.

The runner never calls ``Engine`` methods itself: it awaits an ``EngineHandle``, whose answers
are plain data (events as dicts, KPIs as a dict, the engine's ``now``/``next_t``/``finished``
after each step). ``RemoteEngine`` (``engine_pool.py``) computes in an engine process, so the
serving event loop only waits; ``LocalEngine`` computes here, for the pure and runner tests
and for ``RIDECAST_SIMULATOR_ENGINE_PROCESSES=0``.

After ``close()`` the handle keeps what a finished or stopped run still shows (its time and
KPIs) and nothing else: the engine itself is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import RidecastError
from ..core import snapshot as codec
from ..core.commands import Command, apply
from ..core.emit import Emitter, Event
from ..core.engine import Engine
from ..core.kpis import KpiCache
from ..core.operations import Result
from ..core.settings import SimulatorSettings
from .journal import JournalEntry


class EngineLost(RuntimeError):
    """The engine of a run is gone (its process exited): the run cannot go on from here."""


class JournalDiverged(RuntimeError):
    """A journaled operation was refused on replay: the rebuilt run is not the run."""


@dataclass(slots=True)
class Step:
    """What one ``advance`` gave: the events, and how many journal entries it applied."""

    events: list[Event] = field(default_factory=list)
    applied: int = 0


class EngineHandle(Protocol):
    """An engine the runner awaits; ``now``, ``next_t`` and ``finished`` as of its last
    answer."""

    simulation_id: int
    settings: SimulatorSettings
    now: float
    next_t: float | None
    finished: bool
    cpu_s: float
    """CPU seconds the engine has computed for this handle: what fair turns share out."""

    def timestamp(self, t: float | None = None) -> str:
        """ISO 8601 of simulated time ``t`` (default: ``now``)."""
        ...

    async def advance(self, until: float, entries: Sequence[JournalEntry] = (), *,
                      budget_s: float | None = None) -> Step:
        """Run the timers up to ``until``, applying the due ``entries`` on the way; with
        ``budget_s`` (CPU seconds) it may stop short of ``until``."""
        ...

    async def apply(self, op: Callable[[Engine], Result] | None,
                    command: Command | None) -> Result:
        """An operation at the engine's current time: ``op`` in process, else ``command``."""
        ...

    async def kpis(self, operations: int, *, running: bool, throttle: bool,
                   settled: bool) -> dict[str, Any]:
        """The run's KPIs (see ``KpiCache``)."""
        ...

    async def snapshot(self) -> bytes:
        """The engine's state as a snapshot (``core/snapshot.py``), encoded where it
        computes."""
        ...

    async def close(self) -> None:
        """Free the engine; the handle keeps ``now`` and the time formatting."""
        ...


class HandleState:
    """What every handle keeps: the run's settings, time and timestamp formatting."""

    def __init__(self, simulation_id: int, settings: SimulatorSettings, epoch: float) -> None:
        self.simulation_id = simulation_id
        self.settings = settings
        self.now = 0.0
        self.next_t: float | None = 0.0
        self.finished = False
        self.cpu_s = 0.0
        self._emitter = Emitter(simulation_id, epoch)

    def timestamp(self, t: float | None = None) -> str:
        return self._emitter.ts(self.now if t is None else t)

    def _update(self, answer: dict[str, Any]) -> None:
        self.now = float(answer["now"])
        self.next_t = answer["next_t"]
        self.finished = bool(answer["finished"])


class LocalEngine(HandleState):
    """An ``Engine`` computed in this process (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine.emitter.simulation_id, engine.settings,
                         engine.start.timestamp())
        self._engine: Engine | None = engine
        self._kpis = KpiCache()
        self._sync()

    def _sync(self) -> None:
        engine = self._engine
        if engine is not None:
            self.now, self.next_t, self.finished = engine.now, engine.next_t, engine.finished

    def _live(self) -> Engine:
        if self._engine is None:
            raise EngineLost("the engine of this run has been freed")
        return self._engine

    @property
    def engine(self) -> Engine:
        """The engine itself (it computes in this process); for the tests that look in."""
        return self._live()

    async def advance(self, until: float, entries: Sequence[JournalEntry] = (), *,
                      budget_s: float | None = None) -> Step:
        engine = self._live()
        step = Step()
        cpu0 = time.thread_time()  # this thread's: the engine computes on it
        try:
            for entry in entries:
                if entry.sim_t > until:
                    break
                step.events += engine.advance(entry.sim_t)
                try:
                    _, caused = apply(engine, entry.command)
                except RidecastError as exc:
                    raise JournalDiverged(
                        f"journal entry {entry.seq} ({entry.command.name}) was refused on "
                        f"replay: {exc}") from exc
                step.applied += 1
                step.events += caused
            step.events += engine.advance(until)
        finally:
            self._sync()
            self.cpu_s += time.thread_time() - cpu0
        return step

    async def apply(self, op: Callable[[Engine], Result] | None,
                    command: Command | None) -> Result:
        engine = self._live()
        cpu0 = time.thread_time()
        try:
            if op is not None:
                return op(engine)
            assert command is not None
            return apply(engine, command)
        finally:
            self._sync()
            self.cpu_s += time.thread_time() - cpu0

    async def kpis(self, operations: int, *, running: bool, throttle: bool,
                   settled: bool) -> dict[str, Any]:
        return self._kpis.get(self._live(), operations, running=running, throttle=throttle,
                              settled=settled)

    async def snapshot(self) -> bytes:
        return codec.dumps(self._live())

    async def close(self) -> None:
        self._engine = None
