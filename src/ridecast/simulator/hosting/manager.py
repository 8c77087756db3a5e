"""The simulators of a process: one runner per simulation, its controls and operations.

``SimulatorManager`` is what the REST layer talks to: start (from the simulation's ``data``),
pause, resume, stop, status with KPIs, and the operations, which need a running or paused
simulator (409 ``invalid_state`` otherwise). With a journal store, each run journals the
operations it accepts (``simulator/hosting/journal.py``), and ``adopt`` rebuilds a run another
process owned from its spec and journal.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from ...errors import Conflict
from ..core.commands import Command
from ..core.engine import Engine
from ..core.operations import Result
from ..core.spec import RunSpec
from .clock import clock_for
from .journal import JournalEntry, JournalStore
from .resume import AlreadyPublished, EventTail, Progress
from .runner import EventSink, Runner, Status, Throttle

log = logging.getLogger(__name__)

SimThrottle = Callable[[int, int], Awaitable[None]]
"""Waits until simulation ``[0]`` may publish ``[1]`` more events."""


class SimulatorManager:
    """Runners by simulation id; ``close()`` stops them all."""

    def __init__(
        self, sink: EventSink, *, max_batch: int = 1000, max_finished: int = 100,
        journal: JournalStore | None = None, throttle: SimThrottle | None = None,
        tail: EventTail | None = None,
    ) -> None:
        self.sink = sink
        self.journal = journal
        # Each run's events per second, by simulation id (its organisation's quota).
        self.throttle = throttle
        # Read before a failed batch of events is written again (``Runner._store``).
        self.tail = tail
        # Whether this process's lease on a run still holds: its store writes are retried
        # while it does (the cluster host sets it; None: never retried).
        self.holds: Callable[[int], bool] | None = None
        self.max_batch = max_batch
        # Finished and stopped runs keep their KPIs readable, up to this many (oldest out).
        self.max_finished = max_finished
        self.runners: dict[int, Runner] = {}
        self.specs: dict[int, RunSpec] = {}

    async def start(self, simulation_id: int, data: dict[str, Any] | None, *,
                    after_id: int | None = None) -> dict[str, Any]:
        """Start a fresh run from ``data.simulator`` (a finished or stopped one is replaced);
        ``after_id``: the newest event id in the log now (the run's progress starts there)."""
        current = self.runners.get(simulation_id)
        if current is not None and current.status in (Status.RUNNING, Status.PAUSED):
            raise Conflict(f"the simulator is already {current.status.value}; stop it first",
                           code="invalid_state")
        spec = RunSpec.new(data)
        settings = spec.settings
        runner = Runner(simulation_id, spec.engine(simulation_id),
                        clock_for(settings.realtime_factor), self.sink, self.max_batch,
                        record=self._recorder(simulation_id, spec),
                        published=AlreadyPublished(Progress(0, after_id)),
                        throttle=self._throttle(simulation_id),
                        **self._retrying(simulation_id))
        self._install(simulation_id, spec, runner)
        runner.start()
        await self._drop_old_finished()
        log.info("simulator of simulation %s started (%d vehicles, speed %s)", simulation_id,
                 settings.vehicles, settings.speed)
        return self.status(simulation_id)

    async def adopt(self, simulation_id: int, spec: RunSpec, entries: Sequence[JournalEntry],
                    published: AlreadyPublished, *, sim_now: float, paused: bool,
                    replay_until: float) -> dict[str, Any]:
        """Take over a run another process owned: rebuild its engine from ``spec``, replay
        ``entries`` on the way and publish only what ``published`` lets through; its clock
        reads ``sim_now`` (the run's own clock, pinned to the wall clock), and its engine
        catches up to ``replay_until`` even when ``paused``."""
        settings = spec.settings
        clock = clock_for(settings.realtime_factor, at=sim_now)
        runner = Runner(simulation_id, spec.engine(simulation_id), clock, self.sink,
                        self.max_batch, record=self._recorder(simulation_id, spec),
                        replay=entries, published=published, replay_until=replay_until,
                        throttle=self._throttle(simulation_id),
                        **self._retrying(simulation_id))
        self._install(simulation_id, spec, runner)
        runner.start()
        if paused:
            # Paused before its loop runs; it still catches up to ``sim_now``.
            await runner.pause()
        log.info("simulator of simulation %s taken over (run %s, %d journal entries, %d "
                 "events already published)", simulation_id, spec.run_id, len(entries),
                 published.count)
        return self.status(simulation_id)

    def _install(self, simulation_id: int, spec: RunSpec, runner: Runner) -> None:
        self.runners.pop(simulation_id, None)  # re-inserted last: the newest run
        self.runners[simulation_id] = runner
        self.specs[simulation_id] = spec

    def _retrying(self, simulation_id: int) -> dict[str, Any]:
        holds = self.holds
        return {"holds": partial(holds, simulation_id) if holds is not None else None,
                "tail": self.tail}

    def _recorder(self, simulation_id: int, spec: RunSpec) -> Any:
        if self.journal is None:
            return None
        return partial(self.journal.append, simulation_id, spec.run_id)

    def _throttle(self, simulation_id: int) -> Throttle | None:
        throttle = self.throttle
        if throttle is None:
            return None

        async def wait(count: int) -> None:
            await throttle(simulation_id, count)

        return wait

    def _runner(self, simulation_id: int) -> Runner:
        runner = self.runners.get(simulation_id)
        if runner is None:
            raise Conflict("the simulator has not been started", code="invalid_state")
        return runner

    async def pause(self, simulation_id: int) -> dict[str, Any]:
        await self._runner(simulation_id).pause()
        return self.status(simulation_id)

    async def resume(self, simulation_id: int) -> dict[str, Any]:
        await self._runner(simulation_id).resume()
        return self.status(simulation_id)

    async def stop(self, simulation_id: int) -> dict[str, Any]:
        await self._runner(simulation_id).stop()
        return self.status(simulation_id)

    def status(self, simulation_id: int) -> dict[str, Any]:
        """``{"status", "sim_ts", "kpis", ...}``; idle with no KPIs before the first start."""
        runner = self.runners.get(simulation_id)
        if runner is None:
            return {"status": Status.IDLE.value, "sim_ts": None, "kpis": {}}
        engine = runner.engine
        return {
            "status": runner.status.value,
            "sim_ts": engine.timestamp(),
            "started_sim_ts": engine.timestamp(0.0),
            "error": runner.error,
            "settings": engine.settings.model_dump(mode="json"),
            "kpis": runner.kpis(),
        }

    async def operate(self, simulation_id: int, op: Callable[[Engine], Result],
                      command: Command | None = None, *,
                      wait_s: float | None = None) -> dict[str, Any]:
        """Run an operation on the simulation's engine (see ``Runner.operate``)."""
        return await self._runner(simulation_id).operate(op, command, wait_s=wait_s)

    async def _drop_old_finished(self) -> None:
        done = [sim for sim, runner in self.runners.items()
                if runner.status in (Status.FINISHED, Status.STOPPED)]
        for sim in done[:max(0, len(done) - self.max_finished)]:  # oldest started first
            await self.forget(sim)

    async def forget(self, simulation_id: int) -> None:
        """Stop and drop a simulation's runner (the simulation was deleted)."""
        runner = self.runners.pop(simulation_id, None)
        self.specs.pop(simulation_id, None)
        if runner is not None:
            await runner.close()

    async def close(self) -> None:
        for simulation_id in list(self.runners):
            await self.forget(simulation_id)
