"""The simulators of a process: one runner per simulation, its controls and operations.

``SimulatorManager`` is what the REST layer talks to: start (from the simulation's ``data``),
pause, resume, stop, status with KPIs, and the operations, which need a running or paused
simulator (409 ``invalid_state`` otherwise). With a journal store, each run journals the
operations it accepts (``simulator/hosting/journal.py``), and ``adopt`` rebuilds a run another
process owned from its spec and journal (or from its newest snapshot and the journal after
it; ``snapshots.py``).

With an ``EnginePool`` (``ridecast serve``), each run's engine computes in one of the pool's
engine processes; without one (the tests), in this process. A finished or stopped run keeps
its status and last KPIs only: its engine is freed when it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from ...errors import Conflict
from ...store.snapshots import SnapshotStore
from ..core.commands import Command
from ..core.engine import Engine
from ..core.operations import Result
from ..core.spec import RunSpec
from .clock import clock_for
from .engine_handle import EngineHandle
from .engine_pool import EnginePool
from .journal import JournalEntry, JournalStore
from .publish_lane import PublishLane
from .resume import AlreadyPublished, EventTail, Progress
from .runner import EventSink, Runner, Status, Throttle
from .snapshots import Checkpointer, Restored, SnapshotPolicy

log = logging.getLogger(__name__)

SimThrottle = Callable[[int, int], Awaitable[None]]
"""Waits until simulation ``[0]`` may publish ``[1]`` more events."""

KPI_WAIT_S = 2.0
"""Longest a status waits for a run's KPIs from its engine; then it shows the last ones."""
STARTING = "the simulator is already starting; stop it once it runs"
"""The 409 of a start sent while the run is being built on its node."""


class SimulatorManager:
    """Runners by simulation id; ``close()`` stops them all."""

    def __init__(
        self, sink: EventSink, *, max_batch: int = 1000, max_finished: int = 100,
        journal: JournalStore | None = None, throttle: SimThrottle | None = None,
        tail: EventTail | None = None, pool: EnginePool | None = None,
        publish_share: float | None = None, snapshots: SnapshotStore | None = None,
        snapshot_policy: SnapshotPolicy | None = None,
    ) -> None:
        self.sink = sink
        self.pool = pool
        # Runs at 'max' publish through one lane, at most this share of the loop's time.
        self.lane = PublishLane(publish_share) if publish_share is not None else None
        self.journal = journal
        # Each run's events per second, by simulation id (its organisation's quota).
        self.throttle = throttle
        # Read before a failed batch of events is written again (``Runner._store``).
        self.tail = tail
        # Whether this process's lease on a run still holds: its store writes are retried
        # while it does (the cluster host sets it; None: never retried).
        self.holds: Callable[[int], bool] | None = None
        # Renews a run's lapsed lease when this process still owns it (the cluster host
        # sets it; None: a fenced write refused gives the run up).
        self.reclaim: Callable[[int], Awaitable[bool]] | None = None
        # With both, a run's snapshots are taken (``snapshots.py``).
        self.snapshots = snapshots
        self.snapshot_policy = snapshot_policy or SnapshotPolicy()
        self.max_batch = max_batch
        # Finished and stopped runs keep their KPIs readable, up to this many (oldest out).
        self.max_finished = max_finished
        self.runners: dict[int, Runner] = {}
        self.specs: dict[int, RunSpec] = {}
        # Each run's organisation, when known (kept in its progress, for a takeover).
        self.orgs: dict[int, int] = {}
        # Runs whose start is under way (its engine being built): a second start of the
        # same run meanwhile is refused, else both would build a runner and the first,
        # replaced unseen, would go on publishing. (The API's quota lock makes an
        # organisation's starts take turns already; this holds for any other caller.)
        self._starting: set[int] = set()

    @staticmethod
    def _group(simulation_id: int, org: int | None) -> str:
        """Runs share CPU and publishing fairly by organisation (one of no known
        organisation on its own)."""
        return f"org-{org}" if org is not None else f"simulation-{simulation_id}"

    async def _engine(self, simulation_id: int, spec: RunSpec, org: int | None,
                      restored: Restored | None = None) -> Engine | EngineHandle:
        """The run's engine: fresh from ``spec``, or ``restored`` from its snapshot; in an
        engine process of the pool when there is one."""
        if self.pool is None:
            return restored.engine if restored is not None else spec.engine(simulation_id)
        return await self.pool.open(simulation_id, spec, group=self._group(simulation_id, org),
                                    snapshot=restored.body if restored is not None else None)

    def _slice_s(self) -> float | None:
        return self.pool.slice_s if self.pool is not None else None

    async def start(self, simulation_id: int, data: dict[str, Any] | None, *,
                    after_id: int | None = None, org: int | None = None) -> dict[str, Any]:
        """Start a fresh run from ``data.simulator`` (a finished or stopped one is replaced);
        ``after_id``: the newest event id in the log now (the run's progress starts there);
        ``org``: the simulation's organisation (runs share CPU fairly between them)."""
        if simulation_id in self._starting:
            raise Conflict(STARTING, code="invalid_state")
        current = self.runners.get(simulation_id)
        if current is not None and current.status in (Status.RUNNING, Status.PAUSED):
            raise Conflict(f"the simulator is already {current.status.value}; stop it first",
                           code="invalid_state")
        self._starting.add(simulation_id)
        try:
            return await self._start(simulation_id, data, current, after_id=after_id, org=org)
        finally:
            self._starting.discard(simulation_id)

    async def _start(self, simulation_id: int, data: dict[str, Any] | None,
                     current: Runner | None, *, after_id: int | None,
                     org: int | None) -> dict[str, Any]:
        """``start`` once no other start of the run is under way."""
        spec = RunSpec.new(data)
        settings = spec.settings
        runner = Runner(simulation_id, await self._engine(simulation_id, spec, org),
                        clock_for(settings.realtime_factor), self.sink, self.max_batch,
                        record=self._recorder(simulation_id, spec),
                        published=AlreadyPublished(Progress(0, after_id)),
                        throttle=self._throttle(simulation_id),
                        slice_s=self._slice_s(), lane=self.lane,
                        group=self._group(simulation_id, org),
                        checkpoint=self._checkpointer(simulation_id, spec, 0.0),
                        **self._retrying(simulation_id))
        if current is not None:
            await current.close()  # a finished or stopped run's engine is already freed
        self._install(simulation_id, spec, runner, org)
        runner.start()
        await self._drop_old_finished()
        log.info("simulator of simulation %s started (%d vehicles, speed %s)", simulation_id,
                 settings.vehicles, settings.speed)
        return await self.current(simulation_id)

    async def adopt(self, simulation_id: int, spec: RunSpec, entries: Sequence[JournalEntry],
                    published: AlreadyPublished, *, sim_now: float, paused: bool,
                    replay_until: float, restored: Restored | None = None,
                    org: int | None = None) -> dict[str, Any]:
        """Take over a run another process owned: rebuild its engine from ``spec`` (or start
        from ``restored``, its snapshot), replay ``entries`` on the way and publish only what
        ``published`` lets through; its clock reads ``sim_now`` (the run's own clock, pinned
        to the wall clock), and its engine catches up to ``replay_until`` even when
        ``paused``; ``org``: its organisation, when its previous owner knew it."""
        settings = spec.settings
        clock = clock_for(settings.realtime_factor, at=sim_now)
        engine = await self._engine(simulation_id, spec, org, restored)
        runner = Runner(simulation_id, engine, clock,
                        self.sink, self.max_batch, record=self._recorder(simulation_id, spec),
                        replay=entries, published=published, replay_until=replay_until,
                        throttle=self._throttle(simulation_id),
                        slice_s=self._slice_s(), lane=self.lane,
                        group=self._group(simulation_id, org),
                        next_seq=restored.journal_seq + 1 if restored is not None else None,
                        checkpoint=self._checkpointer(simulation_id, spec, engine.now),
                        **self._retrying(simulation_id))
        previous = self.runners.get(simulation_id)
        if previous is not None:
            await previous.close()
        self._install(simulation_id, spec, runner, org)
        runner.start()
        if paused:
            # Paused before its loop runs; it still catches up to ``sim_now``.
            await runner.pause()
        log.info("simulator of simulation %s taken over (run %s, from %s, %d journal entries "
                 "to replay, %d events already published, %d of them after that point)",
                 simulation_id, spec.run_id,
                 f"its snapshot at {engine.now:.0f} s" if restored is not None else "its start",
                 len(entries), published.count,
                 published.count - (restored.progress.count if restored is not None else 0))
        return await self.current(simulation_id)

    def _install(self, simulation_id: int, spec: RunSpec, runner: Runner,
                 org: int | None) -> None:
        self.runners.pop(simulation_id, None)  # re-inserted last: the newest run
        self.runners[simulation_id] = runner
        self.specs[simulation_id] = spec
        if org is not None:
            self.orgs[simulation_id] = org
        else:
            self.orgs.pop(simulation_id, None)

    def _retrying(self, simulation_id: int) -> dict[str, Any]:
        holds, reclaim = self.holds, self.reclaim
        return {"holds": partial(holds, simulation_id) if holds is not None else None,
                "reclaim": partial(reclaim, simulation_id) if reclaim is not None else None,
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

    def _checkpointer(self, simulation_id: int, spec: RunSpec,
                      now: float) -> Checkpointer | None:
        if self.snapshots is None or not self.snapshot_policy.enabled:
            return None
        return Checkpointer(self.snapshots, simulation_id, spec.run_id, self.snapshot_policy,
                            now=now)

    def _runner(self, simulation_id: int) -> Runner:
        runner = self.runners.get(simulation_id)
        if runner is None:
            raise Conflict("the simulator has not been started", code="invalid_state")
        return runner

    async def pause(self, simulation_id: int, *,
                    wait_s: float | None = None) -> dict[str, Any]:
        await self._runner(simulation_id).pause(wait_s)
        return await self.current(simulation_id)

    async def resume(self, simulation_id: int, *,
                    wait_s: float | None = None) -> dict[str, Any]:
        await self._runner(simulation_id).resume(wait_s)
        return await self.current(simulation_id)

    async def stop(self, simulation_id: int, *,
                   wait_s: float | None = None) -> dict[str, Any]:
        await self._runner(simulation_id).stop(wait_s)
        return await self.current(simulation_id)

    async def refresh(self, simulation_id: int, wait_s: float | None = KPI_WAIT_S) -> None:
        """Bring the run's KPIs up to date (its engine may compute in another process),
        waiting at most ``wait_s`` (None: until they come; 0: in the background)."""
        runner = self.runners.get(simulation_id)
        if runner is not None:
            await runner.refresh_kpis(wait_s)

    async def current(self, simulation_id: int) -> dict[str, Any]:
        """``status`` with the KPIs brought up to date first."""
        await self.refresh(simulation_id)
        return self.status(simulation_id)

    def status(self, simulation_id: int) -> dict[str, Any]:
        """``{"status", "sim_ts", "kpis", ...}``; idle with no KPIs before the first start.
        The KPIs are those of the last ``refresh`` (``current`` does both)."""
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
            "engine_cpu_s": round(engine.cpu_s, 3),
        }

    async def operate(self, simulation_id: int, op: Callable[[Engine], Result] | None,
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
        self.orgs.pop(simulation_id, None)
        if runner is not None:
            await runner.close()

    async def close(self) -> None:
        """Stop every run, then end the engine processes."""
        for simulation_id in list(self.runners):
            await self.forget(simulation_id)
        if self.pool is not None:
            await self.pool.close()
