"""The simulator host of one node: runs what it owns, forwards the rest to the owner.

Every process has a node id (a uuid per start). ``ClusterHost`` wraps this process's
``SimulatorManager`` with a lease per run (``lease.py``):

* ``start`` takes the lease (refused while another node holds a live one on a running or
  paused run) and runs the simulator here;
* every other command on a run owned by a live node elsewhere is forwarded on the bus as a
  ``SimulatorCommand``; the owner runs it and answers with a ``SimulatorReply``, errors
  included, which reach the client unchanged; no answer within the forward timeout is a 503
  ``simulator_owner_unreachable`` with ``Retry-After``;
* status is live on the owner and the owner's last snapshot elsewhere, with ``owner_node``
  and ``takeover`` (null, ``pending`` or ``replaying``).

A node that does not host runs (``hosts_runs`` false: a ``ridecast serve`` with
``RIDECAST_SIMULATOR_HOST=false``, whose runs are left to ``ridecast simulator``
processes) computes no engine and takes no run over. It offers each start on the bus to
every hosting node (``ANY_HOST``); each waits a moment that grows with the runs it already
has (so the least busy tends to win) and tries to take the run's lease, and the one that
gets it starts the run and answers (the others say nothing). Every other command reaches
the owner as above.

A run outlives its node. The owner journals every operation it accepts (``journal.py``) and
keeps the run's spec and progress (events published, simulated clock) in its row; on a clean
shutdown it hands its runs over at once (lease ended, exact progress). Every node looks for
runs whose owner's lease has passed (every ``TAKEOVER_POLL_S``) and takes one over with a
conditional UPDATE: it rebuilds the engine from the run's newest snapshot (or from the spec
when there is none, ``snapshots.py``), replays the journal after it, drops the events already
published (``resume.py``) and goes on from there. Commands for a run being
taken over wait for it (up to the forward timeout) or get a 503 with ``Retry-After``.

The owner renews its leases every third of the lease (sooner, with back-off, after a
failed renewal) and writes a snapshot whenever the status changes (and every renewal while
running, for the KPIs and the progress). A node that cannot renew for a whole lease stops
its runs itself, so that a node cut off from the database does not keep producing events
for a run another node may have taken over. Until then its runners retry the writes the
store refused (``runner.py``): a store fault does not end a run. A runner that gives its run
up (its lease is gone, an operation failed half way, a journal entry could not be written)
is dropped here and its run handed over, to be rebuilt from its journal by the next node
that takes it over (this one or another).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any

from ...bus import Bus, BusMessage, SimulationChanged, SimulatorCommand, SimulatorReply
from ...errors import Conflict, RidecastError, ServiceUnavailable
from ..core.commands import Command, apply
from ..core.spec import ClockState, RunSpec
from .backoff import Backoff, transient
from .journal import JournalEntry, JournalStore
from .lease import (
    ACTIVE,
    CLAIMED_STATUS,
    IDLE_STATUS,
    TAKEOVER_PENDING,
    TAKEOVER_REPLAYING,
    LeaseStore,
    RunRecord,
    effective_status,
    interrupted,
)
from .manager import STARTING, SimulatorManager
from .resume import AlreadyPublished, EventTail, Progress
from .runner import Runner, Status
from .snapshots import Restored, restore

log = logging.getLogger(__name__)

TAKEOVER_POLL_S = 1.0
"""How often a node looks for runs to take over (a handed-over run waits at most this)."""
ANY_HOST = "*"
"""The node id of a start offered to every hosting node (see the module docstring)."""
PLACE_DELAY_PER_RUN_S = 0.02
"""How much later a hosting node answers an offered start per run it already has."""
PLACE_DELAY_MAX_S = 0.5


class _Taken(Conflict):
    """The run's lease is another node's: the start cannot happen here."""

# What the runner says when a command does not apply (kept word for word, so that a client
# gets the same message from any node).
_REFUSALS = {
    "pause": "the simulator is {status}, not running",
    "resume": "the simulator is {status}, not paused",
    "stop": "the simulator is {status}, not running or paused",
}
_REFUSE_OPERATION = "the simulator is {status}: start it first"


class ClusterHost:
    """Start, pause, resume, stop, status and operations of simulator runs, from any node."""

    def __init__(self, manager: SimulatorManager, leases: LeaseStore, bus: Bus, *,
                 lease_s: float, forward_timeout_s: float, node_id: str | None = None,
                 journal: JournalStore | None = None, tail: EventTail | None = None,
                 hosts_runs: bool = True) -> None:
        self.manager = manager
        # False: this node runs no run itself (see the module docstring).
        self.hosts_runs = hosts_runs
        self.leases = leases
        self.bus = bus
        # Without both, runs are not taken over (they read interrupted when their node goes).
        self.journal = journal
        self.tail = tail
        self._takeover_task: asyncio.Task[None] | None = None
        # When each run taken over here was adopted (wall s, simulated s): replay speed.
        self._adopted: dict[int, tuple[float, float]] = {}
        # Runs whose runner this node is building, from its claim of the run's lease (a
        # start; a takeover: from the lease won) until the runner runs (loading the
        # snapshot, starting an engine process): renewed like the runs it runs, else a
        # slow build lets the lease pass and a second node takes or starts the run as well.
        self._taking: set[int] = set()
        self._spec_written: set[int] = set()
        # The previous owner's last snapshot of each run being replayed here: until the
        # engine has caught up, its clock and KPIs are what the run had reached, not the
        # replay's (which start again from zero).
        self._last_seen: dict[int, dict[str, Any]] = {}
        self.lease_s = lease_s
        self.forward_timeout_s = forward_timeout_s
        self.node_id = node_id or uuid.uuid4().hex
        self._pending: dict[str, asyncio.Future[SimulatorReply]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._written: dict[int, str] = {}
        self._renewer: asyncio.Task[None] | None = None
        # When the last successful renewal was sent (monotonic s): the database dated the
        # leases no earlier, so they hold at least ``lease_s`` after it.
        self._renewed_at = time.monotonic()
        manager.holds = self.lease_holds
        manager.reclaim = self.reclaim_lease
        self._unsubscribe = bus.subscribe(self._on_bus)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def takes_over(self) -> bool:
        """Whether runs outlive their node here (a journal and the event log are wired)."""
        return self.journal is not None and self.tail is not None

    def lease_holds(self, simulation_id: int) -> bool:
        """Whether this node's lease on the run surely still holds (by the last renewal
        that went through, on this node's monotonic clock: no clock skew enters)."""
        return (simulation_id in self.manager.runners
                and time.monotonic() - self._renewed_at < self.lease_s)

    async def reclaim_lease(self, simulation_id: int) -> bool:
        """Renew this node's lease on one run, and say whether it still owns it: a lease
        that lapsed (the renewal loop late under load) while no other node took the run
        over is renewed; one another node took is not (``leases.renew`` updates only the
        rows this node owns)."""
        owned = await self.leases.renew(self.node_id, {simulation_id}, self.lease_s)
        return simulation_id in owned

    def start_renewing(self) -> None:
        """Start the lease renewal loop, and the takeover loop (call once, from the loop)."""
        if not self.hosts_runs:
            return  # no run of its own to renew, none to take over
        self._renewer = asyncio.create_task(self._renew_loop(), name="simulator-leases")
        if self.takes_over:
            self._takeover_task = asyncio.create_task(self._takeover_loop(),
                                                      name="simulator-takeover")

    async def close(self) -> None:
        """Stop the runs of this node and hand them over to the other nodes (without a
        journal: mark them ``interrupted``)."""
        self._unsubscribe()
        for loop_task in (self._renewer, self._takeover_task):
            if loop_task is not None:
                loop_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop_task
        for task in list(self._tasks):
            task.cancel()
        active = {sim: runner for sim, runner in self.manager.runners.items()
                  if runner.status.value in ACTIVE}
        statuses = {sim: await self.manager.current(sim) for sim in active}
        progress = {sim: self._progress(sim, runner) for sim, runner in active.items()}
        await self.manager.close()  # settles what is in flight: the progress is exact now
        for sim, runner in active.items():
            try:
                if self.takes_over and sim in self._spec_written:
                    await self.leases.hand_over(sim, self.node_id, _pending(statuses[sim]), {
                        **progress[sim], **runner.progress.to_json()})
                    log.info("simulator of simulation %s handed over (%d events published)",
                             sim, runner.progress.count)
                    continue
                status = statuses[sim]
                await self.leases.release(sim, self.node_id, interrupted(
                    status, str(status["status"]),
                    "the node running this simulator shut down; start it again"))
            except Exception:
                log.exception("could not hand over the simulator of simulation %s", sim)

    # -- the host's API ----------------------------------------------------------------------

    async def start(self, simulation_id: int, data: dict[str, Any] | None, *,
                    org: int | None = None) -> dict[str, Any]:
        """Start a fresh run from ``data.simulator`` on this node (see ``SimulatorManager``);
        ``org``: the simulation's organisation (CPU is shared fairly between them)."""
        args: dict[str, Any] = {"data": data}
        if org is not None:
            args["org"] = org
        return await self.execute(simulation_id, Command("start", args))

    async def pause(self, simulation_id: int) -> dict[str, Any]:
        return await self.execute(simulation_id, Command("pause"))

    async def resume(self, simulation_id: int) -> dict[str, Any]:
        return await self.execute(simulation_id, Command("resume"))

    async def stop(self, simulation_id: int) -> dict[str, Any]:
        return await self.execute(simulation_id, Command("stop"))

    async def operate(self, simulation_id: int, command: Command) -> dict[str, Any]:
        """Run an operation command on the run, wherever it is."""
        return await self.execute(simulation_id, command)

    async def status(self, simulation_id: int) -> dict[str, Any]:
        """Live on the owner; elsewhere the owner's snapshot, the run being taken over, or
        ``interrupted``."""
        if self._active_here(simulation_id):
            await self.manager.refresh(simulation_id)
            return self._live_status(simulation_id)
        record = await self.leases.read(simulation_id)
        if record is None or (record.owner_node == self.node_id
                              and simulation_id in self.manager.runners
                              and not self._lost_here(simulation_id)):
            await self.manager.refresh(simulation_id)
            return self._live_status(simulation_id)
        if self._given_up(record):
            return {**record.status_json, "owner_node": None, "takeover": TAKEOVER_PENDING}
        return effective_status(record, record.read_at)

    def _live_status(self, simulation_id: int) -> dict[str, Any]:
        """This node's status of the run; a running or paused one says it runs here."""
        status = self.manager.status(simulation_id)
        runner = self.manager.runners.get(simulation_id)
        if runner is not None and runner.status.value in ACTIVE:
            replaying = runner.catching_up
            last = self._last_seen.get(simulation_id) if replaying else None
            if last is not None:
                status.update(sim_ts=last.get("sim_ts", status["sim_ts"]),
                              kpis=last.get("kpis", status["kpis"]))
            elif not replaying:
                self._last_seen.pop(simulation_id, None)
            status.update(owner_node=self.node_id,
                          takeover=TAKEOVER_REPLAYING if replaying else None)
        return status

    async def forget(self, simulation_id: int) -> None:
        """Stop and drop the run (its simulation was deleted)."""
        if simulation_id in self.manager.runners:
            await self.manager.forget(simulation_id)
            self._written.pop(simulation_id, None)
            self._spec_written.discard(simulation_id)
            await self.leases.delete(simulation_id)
        if self.journal is not None:  # on every node: its run may be in no node's memory
            await self.journal.forget(simulation_id)
        if self.manager.snapshots is not None:
            await self.manager.snapshots.forget(simulation_id)

    async def execute(self, simulation_id: int, command: Command) -> dict[str, Any]:
        """Run ``command`` here when this node owns the run (or nobody live does), else
        forward it to the owner and return its answer."""
        if self._active_here(simulation_id):
            return await self._local(simulation_id, command)
        record = await self.leases.read(simulation_id)
        now = record.read_at if record is not None else 0.0
        if (record is not None and record.status in ACTIVE and record.resumable
                and not record.live(now) and self.takes_over):
            # Its owner stopped: a node (this one, at the latest) takes it over shortly.
            raise self._taking_over(TAKEOVER_POLL_S)
        if record is not None and self._given_up(record):
            # This node gave the run up and its lease has yet to pass (the store did not
            # take the hand-over): it is taken over when it has.
            raise self._taking_over(record.lease_until - now + TAKEOVER_POLL_S)
        owned_elsewhere = (record is not None and record.owner_node != self.node_id
                           and record.live(now))
        if record is not None and owned_elsewhere and (
                command.name != "start" or record.status in ACTIVE):
            return await self._forward(record, command)
        if (command.name != "start" and record is not None
                and simulation_id not in self.manager.runners):
            # Nobody live owns it: refuse as its runner would have, from its last status.
            status = effective_status(record, now)["status"]
            template = _REFUSALS.get(command.name, _REFUSE_OPERATION)
            raise Conflict(template.format(status=status), code="invalid_state")
        if command.name == "start" and not self.hosts_runs:
            return await self._place(simulation_id, command)
        return await self._local(simulation_id, command)

    # -- here --------------------------------------------------------------------------------

    def _active_here(self, simulation_id: int) -> bool:
        runner = self.manager.runners.get(simulation_id)
        return runner is not None and runner.status.value in ACTIVE and runner.lost is None

    def _lost_here(self, simulation_id: int) -> bool:
        runner = self.manager.runners.get(simulation_id)
        return runner is not None and runner.lost is not None

    def _given_up(self, record: RunRecord) -> bool:
        """A running or paused run this node holds the live lease of but no longer runs."""
        return (record.status in ACTIVE and record.resumable and self.takes_over
                and record.owner_node == self.node_id and record.live(record.read_at)
                and (record.simulation_id not in self.manager.runners
                     or self._lost_here(record.simulation_id)))

    async def _drop_lost(self, simulation_id: int) -> None:
        """Drop a runner that gave its run up and hand the run over with its exact
        progress, to be rebuilt from its journal; when the store does not take that, the
        lease (no longer renewed) runs out and the run is taken over then."""
        runner = self.manager.runners.get(simulation_id)
        if runner is None or runner.lost is None:
            return
        status = self.manager.status(simulation_id)
        progress = self._progress(simulation_id, runner)
        await self.manager.forget(simulation_id)  # settles what is in flight
        self._written.pop(simulation_id, None)
        if not (self.takes_over and simulation_id in self._spec_written):
            # Nothing can rebuild it (no journal): the run ends, and says why.
            status.update(status=Status.STOPPED.value, error=runner.lost)
            with contextlib.suppress(Exception):
                await self.leases.release(simulation_id, self.node_id, status)
            return
        try:
            await self.leases.hand_over(simulation_id, self.node_id, _pending(status),
                                        {**progress, **runner.progress.to_json()})
        except Exception as exc:
            log.debug("handing over the simulator of simulation %s: %s", simulation_id, exc)

    def _taking_over(self, seconds: float) -> ServiceUnavailable:
        retry_after = max(1, math.ceil(seconds))
        # In the details too, so that a node that forwarded the command answers the same
        # Retry-After (``_error_from``).
        error = ServiceUnavailable(
            "this simulator run is being taken over after its node stopped; retry in "
            f"{retry_after}s", code="simulator_owner_unreachable",
            details=[{"retry_after": retry_after}])
        error.retry_after = retry_after
        return error

    def _command_wait_s(self) -> float:
        """The longest a command waits here before its answer: less than the forward
        timeout, so a node that forwarded the command gets this answer (and its
        Retry-After) before it gives up waiting, and an answer of 503 did nothing."""
        return 0.8 * self.forward_timeout_s

    def _catching_up(self, simulation_id: int) -> bool:
        runner = self.manager.runners.get(simulation_id)
        return runner is not None and runner.catching_up

    async def _caught_up(self, simulation_id: int, *, forwarded: bool) -> float | None:
        """Wait (up to ``_command_wait_s``) for a run taken over here to catch up; then a
        503 whose Retry-After is the replay's remaining time at its pace so far. The
        seconds left of that wait, for the step in progress (None: as long as it takes,
        for a caught-up run's command from this node's own client: nobody gives up
        waiting for it sooner)."""
        runner = self.manager.runners.get(simulation_id)
        if runner is None or not runner.catching_up:
            return self._command_wait_s() if forwarded else None
        deadline = time.monotonic() + self._command_wait_s()
        while runner.catching_up and runner.status.value in ACTIVE:
            if time.monotonic() >= deadline:
                raise self._taking_over(self._replay_left_s(simulation_id, runner))
            await asyncio.sleep(0.02)
        return max(0.0, deadline - time.monotonic())

    def _replay_left_s(self, simulation_id: int, runner: Runner) -> float:
        wall0, sim0 = self._adopted.get(simulation_id, (time.monotonic(), 0.0))
        done = runner.engine.now - sim0
        rate = done / max(1e-3, time.monotonic() - wall0)
        left = runner.behind_s
        return left / rate if rate > 0 else TAKEOVER_POLL_S

    async def _local(self, simulation_id: int, command: Command, *,
                     forwarded: bool = False) -> dict[str, Any]:
        manager = self.manager
        if command.name == "start":
            org = command.args.get("org")
            return await self._start_here(simulation_id, command.args.get("data"),
                                          org if isinstance(org, int) else None)
        if command.name == "stop":
            # A stop needs no caught-up run: it ends the replay, after the step in progress.
            bounded = forwarded or self._catching_up(simulation_id)
            await manager.stop(simulation_id,
                               wait_s=self._command_wait_s() if bounded else None)
            await self._snapshot(simulation_id)
            await manager.refresh(simulation_id)
            return self._live_status(simulation_id)
        wait_s = await self._caught_up(simulation_id, forwarded=forwarded)
        if command.name == "pause":
            await manager.pause(simulation_id, wait_s=wait_s)
        elif command.name == "resume":
            await manager.resume(simulation_id, wait_s=wait_s)
        else:
            try:
                return await manager.operate(simulation_id, partial(apply, command=command),
                                             command, wait_s=wait_s)
            except Exception:
                if self._lost_here(simulation_id):
                    await self._drop_lost(simulation_id)
                raise
        await self._snapshot(simulation_id)
        await manager.refresh(simulation_id)
        return self._live_status(simulation_id)

    async def _start_here(self, simulation_id: int, data: dict[str, Any] | None,
                          org: int | None = None) -> dict[str, Any]:
        if self._active_here(simulation_id):
            return await self.manager.start(simulation_id, data)  # 409, as before
        if simulation_id in self._taking:
            # Being started here: a second claim of this node's own lease would pass, and its
            # failure would release the lease the first start holds. (Through the API an
            # organisation's starts take turns already, under its quota lock.)
            raise Conflict(STARTING, code="invalid_state")
        self._taking.add(simulation_id)
        try:
            return await self._claim_and_start(simulation_id, data, org)
        finally:
            self._taking.discard(simulation_id)

    async def _claim_and_start(self, simulation_id: int, data: dict[str, Any] | None,
                               org: int | None) -> dict[str, Any]:
        """``_start_here`` once no other start of the run is under way here."""
        previous = await self.leases.read(simulation_id)
        if not await self.leases.acquire(simulation_id, self.node_id, self.lease_s,
                                         CLAIMED_STATUS):
            raise _Taken("the simulator is already running on another node; stop it first",
                         code="invalid_state")
        self._spec_written.discard(simulation_id)
        try:
            # The new run's events come after every event logged so far: a takeover looks
            # for what it published only there (an earlier run of the seed has the same).
            after_id = await self.tail.newest_id() if self.tail is not None else None
            if self.journal is not None:  # the previous run's: it is over
                await self.journal.forget(simulation_id)
            if self.manager.snapshots is not None:
                await self.manager.snapshots.forget(simulation_id)
            await self.manager.start(simulation_id, data, after_id=after_id, org=org)
        except BaseException:
            await self.leases.release(simulation_id, self.node_id,
                                      previous.status_json if previous else IDLE_STATUS)
            raise
        await self._snapshot(simulation_id)
        await self.manager.refresh(simulation_id)
        return self._live_status(simulation_id)

    def _progress(self, simulation_id: int, runner: Runner) -> dict[str, Any]:
        """The run's progress for its row: events published, and its clock."""
        clock = ClockState(self.leases.now(), runner.clock.target(runner.engine.now))
        # The engine's own time too: a paused run's engine stands behind its clock (it
        # catches up on resume), and its successor must stand where it stood.
        progress = {**runner.progress.to_json(), "clock": clock.to_json(),
                    "engine_t": runner.engine.now}
        org = self.manager.orgs.get(simulation_id)
        if org is not None:  # its successor shares CPU fairly by it too
            progress["org"] = org
        return progress

    async def _snapshot(self, simulation_id: int) -> None:
        runner = self.manager.runners.get(simulation_id)
        spec = self.manager.specs.get(simulation_id)
        # In the background: a renewal never waits for an engine (the next one writes them).
        await self.manager.refresh(simulation_id, wait_s=0)
        status = (self._live_status(simulation_id) if self._active_here(simulation_id)
                  else self.manager.status(simulation_id))
        extra: dict[str, Any] = {}
        if runner is not None and spec is not None and self.takes_over:
            extra["progress"] = self._progress(simulation_id, runner)
            if simulation_id not in self._spec_written:
                extra["spec"] = spec.to_json()
        if await self.leases.write(simulation_id, self.node_id, self.lease_s, status,
                                   **extra):
            if "spec" in extra:
                self._spec_written.add(simulation_id)
            self._written[simulation_id] = str(status["status"])
        else:  # another node took the run over: two runners must not publish for it
            log.warning("simulator of simulation %s: this node no longer owns the run; "
                        "stopping it here", simulation_id)
            await self.manager.forget(simulation_id)
            self._written.pop(simulation_id, None)

    async def _takeover_loop(self) -> None:
        while True:
            try:
                for sim in list(self.manager.runners):
                    await self._drop_lost(sim)
                for record in await self.leases.orphans():
                    await self.take_over(record)
                # A run that has caught up says so to the other nodes now, not at renewal.
                for sim in list(self._adopted):
                    runner = self.manager.runners.get(sim)
                    if runner is None or not runner.catching_up:
                        self._adopted.pop(sim, None)
                        if runner is not None:
                            await self._snapshot(sim)
            except ServiceUnavailable as exc:  # the store's outage: logged by its engine
                log.debug("looking for simulator runs to take over: %s", exc)
            except Exception:
                log.exception("looking for simulator runs to take over failed")
            await asyncio.sleep(TAKEOVER_POLL_S)

    async def take_over(self, record: RunRecord) -> bool:
        """Take ``record``'s run over, if this node wins it: rebuild, replay, go on."""
        assert self.journal is not None and self.tail is not None
        if not await self.leases.take_over(record, self.node_id, self.lease_s, {
                **record.status_json, "owner_node": self.node_id,
                "takeover": TAKEOVER_REPLAYING}):
            return False
        sim = record.simulation_id
        self._taking.add(sim)
        try:
            return await self._rebuild(record)
        finally:
            self._taking.discard(sim)

    async def _rebuild(self, record: RunRecord) -> bool:
        """``take_over`` once this node holds the run's lease."""
        sim = record.simulation_id
        try:
            spec = RunSpec.from_json(record.spec_json or {})
            progress_json = record.progress_json or {}
            restored, entries, published = await self._resume_point(
                sim, spec, Progress.from_json(progress_json))
            clock = ClockState.from_json(progress_json.get("clock"))
            paused = record.status == Status.PAUSED.value
            sim_now = clock.now(self.leases.now(), spec.settings.realtime_factor,
                                paused) if clock else 0.0
            engine_t = float(progress_json.get("engine_t", sim_now))
            org = progress_json.get("org")
            self._adopted[sim] = (time.monotonic(), restored.engine.now if restored else 0.0)
            self._last_seen[sim] = dict(record.status_json)
            await self.manager.adopt(sim, spec, entries, published,
                                     sim_now=sim_now, paused=paused,
                                     replay_until=engine_t if paused else sim_now,
                                     restored=restored,
                                     org=org if isinstance(org, int) else None)
            self._spec_written.add(sim)
            await self._snapshot(sim)
        except Exception as exc:
            if transient(exc):
                # The store went down mid-takeover (its engine logs that once). Not the
                # run's fault: it is not marked interrupted; the lease just taken runs out
                # and the run is an orphan again, taken over once the store answers.
                log.debug("taking over the simulator of simulation %s: %s", sim, exc)
                self._adopted.pop(sim, None)
                await self.manager.forget(sim)
                return False
            log.exception("taking over the simulator of simulation %s failed", sim)
            await self.manager.forget(sim)
            await self.leases.release(sim, self.node_id, interrupted(
                record.status_json, record.status,
                f"taking the run over failed ({type(exc).__name__}); start it again"))
            return False
        log.info("simulator of simulation %s: run %s taken over by node %s (was %s)", sim,
                 spec.run_id, self.node_id, record.owner_node)
        return True

    async def _resume_point(
        self, sim: int, spec: RunSpec, progress: Progress,
    ) -> tuple[Restored | None, list[JournalEntry], AlreadyPublished]:
        """Where a takeover starts: the run's newest snapshot (when there is one this code
        can load) and the journal after it, or its start and the whole journal; and what of
        the run's events the previous owner published, from ``progress`` (its last record)
        or the snapshot's, whichever is further on."""
        assert self.journal is not None and self.tail is not None
        snapshots = self.manager.snapshots
        restored = await restore(snapshots, spec) if snapshots is not None else None
        base = 0
        if restored is not None:
            base = restored.progress.count
            if restored.progress.count >= progress.count:
                progress = restored.progress
        entries = await self.journal.read(
            spec.run_id, after_seq=restored.journal_seq if restored is not None else 0)
        tail = await self.tail.after(sim, progress.last_id or 0)
        return restored, entries, AlreadyPublished(progress, tail, base=base)

    async def _renew_loop(self) -> None:
        delays = None
        while True:
            # After a failed renewal the next comes sooner, backing off: the lease must not
            # lapse for want of a try while the store answers again.
            await asyncio.sleep(self.lease_s / 3 if delays is None
                                else min(self.lease_s / 3, next(delays)))
            try:
                await self.renew()
                delays = None
            except Exception as exc:
                if delays is None:
                    delays = Backoff(first_s=0.1).delays()
                if isinstance(exc, ServiceUnavailable):  # logged once by the store's engine
                    log.debug("renewing the simulator leases: %s", exc)
                else:
                    log.exception("renewing the simulator leases failed")
                if time.monotonic() - self._renewed_at > self.lease_s:
                    await self._stop_all("its lease could not be renewed")

    async def renew(self) -> None:
        """Extend this node's leases, drop runs it lost, and write changed snapshots."""
        for sim in list(self.manager.runners):
            await self._drop_lost(sim)
        ids = set(self.manager.runners) | self._taking
        sent_at = time.monotonic()
        owned = await self.leases.renew(self.node_id, ids, self.lease_s)
        self._renewed_at = sent_at
        owned &= set(self.manager.runners)  # a run still being rebuilt has nothing to write
        for simulation_id in ids - owned - self._taking:
            log.warning("simulator of simulation %s: the run moved to another node; "
                        "stopping it here", simulation_id)
            await self.manager.forget(simulation_id)
            self._written.pop(simulation_id, None)
        for simulation_id in owned:
            status = self.manager.status(simulation_id)
            if status["status"] in ACTIVE or self._written.get(simulation_id) != status["status"]:
                await self._snapshot(simulation_id)

    async def _stop_all(self, why: str) -> None:
        for simulation_id, runner in list(self.manager.runners.items()):
            if runner.status.value in ACTIVE:
                log.error("simulator of simulation %s stopped here: %s", simulation_id, why)
                await self.manager.forget(simulation_id)

    # -- forwarding --------------------------------------------------------------------------

    async def _forward(self, record: RunRecord, command: Command) -> dict[str, Any]:
        unreachable = ServiceUnavailable(
            f"node {record.owner_node} runs this simulator and did not answer within "
            f"{self.forward_timeout_s:g}s", code="simulator_owner_unreachable")

        def owner_unreachable() -> ServiceUnavailable:
            # The owner answers by the end of its lease, or is taken over within a poll
            # after it; counted when the 503 is sent, not before the forward's wait (which
            # would add up to RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S to it).
            unreachable.retry_after = max(1, math.ceil(record.lease_until - self.leases.now()
                                                       + TAKEOVER_POLL_S))
            return unreachable

        return await self._ask(record.owner_node, record.simulation_id, command,
                               owner_unreachable)

    async def _place(self, simulation_id: int, command: Command) -> dict[str, Any]:
        """Offer a start to every hosting node; the answer of the one that took it."""

        def nobody() -> ServiceUnavailable:
            return ServiceUnavailable(
                f"no simulator process took this run within {self.forward_timeout_s:g}s "
                "(this node runs none: RIDECAST_SIMULATOR_HOST=false; is a `ridecast "
                "simulator` process running?)", code="simulator_owner_unreachable",
                retry_after=1)

        return await self._ask(ANY_HOST, simulation_id, command, nobody)

    async def _ask(self, node_id: str, simulation_id: int, command: Command,
                   unreachable: Callable[[], ServiceUnavailable]) -> dict[str, Any]:
        """Send ``command`` to ``node_id`` on the bus and return its answer (its error
        raised here); ``unreachable()`` when none comes within the forward timeout."""
        request_id = uuid.uuid4().hex
        reply_future: asyncio.Future[SimulatorReply] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = reply_future
        message = SimulatorCommand(request_id, node_id, simulation_id,
                                   command.name, command.args_json())
        owner_unreachable = unreachable

        try:
            try:
                await self.bus.publish([message])
            except Exception as exc:  # the bus is down: the owner cannot be reached either
                log.warning("forwarding %s on simulation %s failed: %s", command.name,
                            simulation_id, exc)
                raise owner_unreachable() from exc
            async with asyncio.timeout(self.forward_timeout_s):
                reply = await reply_future
        except TimeoutError:
            raise owner_unreachable() from None
        finally:
            self._pending.pop(request_id, None)
        body: dict[str, Any] = json.loads(reply.body_json)
        if reply.ok:
            return body
        raise _error_from(body, reply.status_code)

    def _on_bus(self, messages: Sequence[BusMessage]) -> None:
        for message in messages:
            if isinstance(message, SimulatorReply):
                future = self._pending.get(message.request_id)
                if future is not None and not future.done():
                    future.set_result(message)
            elif isinstance(message, SimulatorCommand) and message.node_id == self.node_id:
                self._spawn(self._serve(message))
            elif (isinstance(message, SimulatorCommand) and message.node_id == ANY_HOST
                  and self.hosts_runs and message.command == "start"):
                self._spawn(self._serve(message, offered=True))
            elif isinstance(message, SimulationChanged) and message.deleted:
                self._spawn(self.forget(message.simulation_id))

    async def _refuse_given_up(self, simulation_id: int) -> None:
        """A command forwarded here for a run this node gave up, or is taking over again,
        and has no runner of yet: a 503 (it is being taken over), as this node answers its
        own clients then; not the 409 of a run that was never started."""
        if self._active_here(simulation_id):
            return
        record = await self.leases.read(simulation_id)
        if record is not None and self._given_up(record):
            raise self._taking_over(record.lease_until - record.read_at + TAKEOVER_POLL_S)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, message: SimulatorCommand, *, offered: bool = False) -> None:
        """Run a command sent to this node and answer it; an ``offered`` start (sent to
        every hosting node) is tried after a delay that grows with this node's runs, and
        is not answered when another node has the run."""
        received = time.monotonic()
        try:
            command = Command.from_json(message.command, message.args_json)
            if offered:
                await asyncio.sleep(self._place_delay_s())
                record = await self.leases.read(message.simulation_id)
                if (record is not None and record.status in ACTIVE
                        and record.owner_node != self.node_id and record.live(record.read_at)):
                    return  # another node took it (or has it): it answers
                if time.monotonic() - received > self._command_wait_s():
                    # Its asker answers 503 about now: a start it refused must not happen.
                    log.warning("simulator of simulation %s: an offered start came too late "
                                "to be answered in time; not taken", message.simulation_id)
                    return
            if command.name != "start":
                await self._refuse_given_up(message.simulation_id)
            body = await self._local(message.simulation_id, command, forwarded=True)
            reply = SimulatorReply(message.request_id, True, 200, json.dumps(body, default=str))
        except RidecastError as exc:
            if offered and isinstance(exc, _Taken):
                return  # another node took it meanwhile: it answers
            reply = SimulatorReply(message.request_id, False, exc.http_status,
                                   json.dumps(exc.to_body()))
        except Exception:
            log.exception("forwarded simulator command %s on simulation %s failed",
                          message.command, message.simulation_id)
            error = RidecastError("internal error; it has been logged")
            reply = SimulatorReply(message.request_id, False, 500, json.dumps(error.to_body()))
        await self.bus.publish([reply])

    def _place_delay_s(self) -> float:
        runs = sum(1 for runner in self.manager.runners.values()
                   if runner.status.value in ACTIVE)
        return min(PLACE_DELAY_MAX_S, PLACE_DELAY_PER_RUN_S * runs)


def _pending(status: dict[str, Any]) -> dict[str, Any]:
    """The status of a run handed over: nobody owns it until a node takes it over."""
    return {**status, "owner_node": None, "takeover": TAKEOVER_PENDING}


def _error_from(body: dict[str, Any], status_code: int) -> RidecastError:
    """The owner's error, raised again here with the same code, message and details."""
    error = body.get("error", {})
    code = str(error.get("code", "internal_error"))
    kind = ServiceUnavailable if status_code == 503 else RidecastError
    details = list(error.get("details", []))
    try:
        raised = kind(str(error.get("message", "")), code=code, details=details)
    except KeyError:  # a code this node does not know (a newer owner): keep the message
        return RidecastError(str(error.get("message", "")))
    for detail in details:  # the owner's Retry-After (a run it is still taking over)
        if isinstance(detail, dict) and isinstance(detail.get("retry_after"), int):
            raised.retry_after = detail["retry_after"]
    return raised
