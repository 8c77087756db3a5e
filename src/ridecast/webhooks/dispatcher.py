"""The dispatcher: claims units of due deliveries and sends them.

Two tasks and one task per claimed unit:

* the cycle loop wakes on a bus batch holding a ``StoredEvent`` with ``has_webhook`` (this
  process appended it; its body is kept for the first attempt, see ``bodies``), on a
  finished attempt, when a retry this process scheduled comes due, and every
  ``poll_interval_s`` however busy (rows written by another process, their retries coming
  due, leases of a dead or stalled worker running out). Each cycle is one
  transaction (``claimer``): it records the finished attempts gathered since the last one,
  then claims units (``claims.plan_units``): an ordered lane of one simulation, or an
  unordered chunk of one URL; the store counts units in flight per URL, so the
  per-endpoint limit holds across every worker process;
* a unit task sends its deliveries one after the other, in ``event_id`` order, renewing the
  unit's lease when a slow receiver would outlast it; a unit that finds its lease taken by
  another worker drops what it holds, unsent. In an ordered lane a delivery that must be
  retried gives the rest of the lane back (head-of-line). An unordered chunk running out
  asks the next cycle for more rows of its URL under its token, so its slot never waits
  for a claim;
* the maintenance loop updates the queue gauges (depth; per simulation, the backlog and
  the age of its oldest undelivered event) and purges old finished deliveries;
* in a process whose bus brings no other process's rows (``ridecast worker`` on the
  in-process bus), the outbox watch wakes the cycle loop when a row is added (``watch``).

A delivery goes to the URL in force when it is sent (the simulation's current settings, read
through the ``SimulationDirectory`` port), not the one in force when its event was appended;
with no webhook settings left, it is cancelled (``failed``, replayable). Every collaborator
comes from ``app.py``; the numbers come from the ``DeliveryPolicy``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..bus import Bus, BusMessage, StoredEvent
from ..errors import ServiceUnavailable
from ..metrics import (
    WEBHOOK_ATTEMPTS,
    WEBHOOK_BACKLOG,
    WEBHOOK_LATENCY,
    WEBHOOK_OLDEST_AGE,
    WEBHOOK_QUEUE,
)
from ..ports import SimulationDirectory
from .bodies import Bodies
from .claimer import Claimer
from .deadline import Deadline
from .deliverylog import DeliveryLog
from .health import EndpointHealth
from .isolate import record_apart, refuses_row
from .jobs import RELEASE, Job, Result, Unit
from .policy import DeliveryPolicy
from .recorder import Recorder
from .retry import ErrorClass, Verdict, honours_retry_after, judge, next_delay
from .sender import Attempt, Sender
from .watch import OutboxWatch

log = logging.getLogger(__name__)

DisableHook = Callable[[int, float, str], Awaitable[None]]
# Successes are counted when their batch is recorded (one ``inc`` per batch); the other
# outcomes when they are judged.
SUCCEEDED = WEBHOOK_ATTEMPTS.labels("succeeded")
# Retries due within this much of each other wake the cycle once.
RETRY_WAKE_RESOLUTION_S = 0.01


class Dispatcher:
    """Delivers the outbox; start with ``start()``, stop with ``close()``."""

    def __init__(
        self,
        policy: DeliveryPolicy,
        *,
        claimer: Claimer,
        recorder: Recorder,
        deliveries: DeliveryLog,
        sender: Sender,
        simulations: SimulationDirectory,
        health: EndpointHealth,
        bodies: Bodies,
        bus: Bus,
        disable: DisableHook,
        watch: OutboxWatch | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._policy = policy
        # The wall clock retention dates finished deliveries by (a test passes its own).
        self._clock = clock
        self._claimer = claimer
        self._recorder = recorder
        self._deliveries = deliveries
        self._sender = sender
        self._simulations = simulations
        self._health = health
        self._bodies = bodies
        self._bus = bus
        self._disable = disable
        self._watch = watch
        self._rng = rng or random.Random()
        self._wake = asyncio.Event()
        # Something may be claimable: new events, a unit ended (a slot or a lane is free),
        # a wake-up from outside, the poll. Otherwise a cycle only records results.
        self._claim_due = True
        # Look for unordered rows whose lease ran out (a dead worker's): on the poll only, as
        # they have waited a whole lease already.
        self._stale_due = True
        self._results: list[Result] = []
        # When retries this process scheduled come due before the next poll (a heap of
        # times rounded up to RETRY_WAKE_RESOLUTION_S, and the same as a set).
        self._retries: list[float] = []
        self._retry_steps: set[float] = set()
        # Claim token -> the deliveries whose result waits in ``_results`` or in a cycle
        # writing it; their unit keeps the lease until the write (``_keep_until_recorded``).
        self._unrecorded: dict[str, set[int]] = {}
        self._recorded = asyncio.Event()  # set (and replaced) after each write of results
        self._tasks: list[asyncio.Task[None]] = []
        self._units: set[asyncio.Task[None]] = set()
        self._unsubscribe: Callable[[], None] | None = None
        self._held: dict[int, Job] = {}  # claimed here and neither finished nor given back
        # Unordered units running out: token -> URL, asked and not yet sent to a claim; and
        # token -> the deliveries left to the unit's running task (rows given to the token
        # are appended there; ``_run_unit``).
        self._refill_wanted: dict[str, str] = {}
        self._refilling: dict[str, deque[Job]] = {}
        # Claim token -> the URL its rows were repointed to (one statement per unit and URL).
        self._repointed: dict[str, str] = {}
        self.delivered = 0

    @property
    def in_memory(self) -> int:
        """Deliveries claimed by this dispatcher and not finished yet."""
        return len(self._held)

    @property
    def units_running(self) -> int:
        return len(self._units)

    def start(self) -> None:
        self._unsubscribe = self._bus.subscribe(self._on_bus)
        # The first cycle at once: what is due already (a restart's backlog, the rows a
        # worker started beside) does not wait for the poll.
        self._wake.set()
        self._tasks = [
            asyncio.create_task(self._cycle_loop(), name="ridecast-webhook-cycle"),
            asyncio.create_task(self._maintenance_loop(), name="ridecast-webhook-maintenance"),
            asyncio.create_task(self._stalled_loop(), name="ridecast-webhook-stalled"),
        ]
        if self._watch is not None:
            self._tasks.append(asyncio.create_task(self._watch.run(self.wake),
                                                   name="ridecast-webhook-outbox-watch"))

    def wake(self) -> None:
        """Look for due deliveries now (after an append, a retry request, a finished attempt)."""
        self._claim_due = True
        self._wake.set()

    def _on_bus(self, messages: Sequence[BusMessage]) -> None:
        woken = False
        for message in messages:
            if isinstance(message, StoredEvent) and message.has_webhook:
                self._bodies.add(message.event_id, message.body)
                woken = True
        if woken:
            self.wake()  # one wake-up per bus batch (a commit batch or more)

    # ---- claiming ------------------------------------------------------------------------

    async def _cycle_loop(self) -> None:
        policy = self._policy
        next_poll = time.monotonic() + policy.poll_interval_s
        while True:
            wait = next_poll - time.monotonic()
            if self._retries:
                wait = min(wait, self._retries[0] - time.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, wait))
            if time.monotonic() >= next_poll:
                # The poll comes every interval, busy or not: rows of other processes,
                # their retries coming due, and unordered rows whose lease ran out.
                next_poll = time.monotonic() + policy.poll_interval_s
                self._claim_due = True
                self._stale_due = True
            now = time.time()
            while self._retries and self._retries[0] <= now:
                self._retry_steps.discard(heapq.heappop(self._retries))
                self._claim_due = True  # a retry this process scheduled is due
            if self._results and len(self._results) < policy.write_batch and not self._claim_due:
                # Only results to write: let a batch gather, one commit for many. A freed
                # slot or new rows are claimed at once (with what has gathered).
                await asyncio.sleep(policy.write_interval_s)
            self._wake.clear()
            try:
                await self._cycle()
            except Exception as exc:
                # Not recorded: the rows stay leased and are sent again when the lease runs
                # out (at least once), unless a later cycle records them first. A store
                # outage is logged by the store's engine, once, not here per cycle.
                if isinstance(exc, ServiceUnavailable):
                    log.debug("recording or claiming webhook deliveries failed: %s", exc)
                else:
                    log.exception("recording or claiming webhook deliveries failed; retrying")
                await asyncio.sleep(policy.poll_interval_s)

    async def _cycle(self) -> None:
        """Record what finished, then claim, in one transaction; again while it fills up."""
        policy = self._policy
        while True:
            batch = self._results[:policy.write_batch]
            self._results = self._results[policy.write_batch:]
            room = policy.max_in_memory - self.in_memory
            want = min(policy.claim_units, room // policy.chunk_rows) if self._claim_due else 0
            self._claim_due = False
            extend = list(self._refill_wanted.items())
            self._refill_wanted.clear()
            if room < policy.chunk_rows:
                extend = []  # the units run out and end; their slots are planned afresh
            if want <= 0 and not batch and not extend:
                return  # a finished unit wakes us again
            extend_tokens = {token for token, _url in extend}
            try:
                units = await self._claimer.claim(
                    max_units=max(want, 0), unit_rows=policy.unit_rows,
                    chunk_rows=policy.chunk_rows, per_endpoint=policy.per_endpoint,
                    lease_s=policy.lease_s, record=batch, bodies=self._bodies.mapping,
                    stale=self._stale_due and want > 0, extend=extend,
                )
            except Exception as exc:
                self._claim_due = True
                if not batch or not refuses_row(exc):
                    self._results = batch + self._results
                    raise
                # One result the store refuses must not hold back the others
                # (webhooks/isolate.py); the claim is tried again at once.
                apart = await record_apart(self._recorder.record, batch)
                self._results = apart.pending + self._results
                _count_successes(apart.written)
                self._written(apart.written + apart.refused)
                self._schedule_retries(apart.written)
                if not apart.refused:
                    raise  # the results were not the cause: the claim itself failed
                continue
            _count_successes(batch)
            self._written(batch)
            self._schedule_retries(batch)
            if want > 0:
                self._stale_due = False
            new = 0
            for unit in units:
                todo = self._refilling.get(unit.token)
                if todo is not None:  # more for a running unit: its task sends them next
                    self._hold(unit.jobs)
                    todo.extend(unit.jobs)
                else:
                    new += unit.token not in extend_tokens
                    await self._start_unit(unit)
            if new == want > 0:
                self._claim_due = True  # there may be more
            if not self._claim_due and len(self._results) < policy.write_batch:
                return  # the next finished attempt or bus batch wakes the loop

    async def _start_unit(self, unit: Unit) -> None:
        # A unit of ours whose lease ran out while it was still sending can come back: the
        # task that holds those deliveries sends them, once.
        jobs = [job for job in unit.jobs if job.delivery_id not in self._held]
        if not jobs:
            return
        if len(jobs) < len(unit.jobs) and unit.jobs[0].ordered:
            # Part of this lane is still being sent here: a second task would put two
            # requests of one simulation in flight. Give the rest back; the lane stays held
            # by the task that is sending it.
            await self._claimer.release([(job.delivery_id, job.token) for job in jobs])
            return
        self._hold(jobs)
        task = asyncio.create_task(
            self._run_unit(Unit(unit.token, unit.lease_until, jobs)),
            name=f"ridecast-webhook-unit-{jobs[0].simulation_id}",
        )
        self._units.add(task)
        task.add_done_callback(self._units.discard)

    def _written(self, batch: Sequence[Result]) -> None:
        """``batch`` is in the store: its units need not keep their leases for it."""
        for result in batch:
            ids = self._unrecorded.get(result.token)
            if ids is not None:
                ids.discard(result.delivery_id)
                if not ids:
                    del self._unrecorded[result.token]
        recorded, self._recorded = self._recorded, asyncio.Event()
        recorded.set()

    def _schedule_retries(self, batch: Sequence[Result]) -> None:
        """Wake the cycle when a retry in ``batch`` comes due before the next poll, so
        it is sent on time, not up to a poll interval late. Times are rounded up to
        ``RETRY_WAKE_RESOLUTION_S``, one entry per step: the heap holds at most a poll
        interval's worth of steps (later retries are the poll's)."""
        now = time.time()
        horizon = now + self._policy.poll_interval_s
        for result in batch:
            due = result.next_attempt_at
            if result.status != "pending" or not now < due < horizon:
                continue
            step = math.ceil(due / RETRY_WAKE_RESOLUTION_S) * RETRY_WAKE_RESOLUTION_S
            if step not in self._retry_steps:
                self._retry_steps.add(step)
                heapq.heappush(self._retries, step)

    def _hold(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self._held[job.delivery_id] = job
            self._bodies.drop(job.event_id)

    # ---- sending -------------------------------------------------------------------------

    async def _run_unit(self, unit: Unit) -> None:
        """Send the unit's deliveries in order; see the module docstring."""
        policy = self._policy
        todo = deque(unit.jobs)
        token = unit.token
        loose = not todo[0].ordered
        if loose:
            self._refilling[token] = todo
        asked = False
        sent = 0
        lease_until = unit.lease_until
        deadline = Deadline()  # one timer for the unit's requests, not one per request
        try:
            while todo:
                job = todo[0]
                # Renew while enough of the lease is left for this send to finish in it.
                if time.time() + policy.renew_at_s > lease_until:
                    renewed = time.time() + policy.lease_s
                    if not await self._claimer.renew(
                        token, [j.delivery_id for j in todo], renewed, lane=not loose
                    ):
                        # The lease ran out and another worker holds these now: drop them
                        # unsent (that worker sends them; a second send would put one
                        # webhook-id, or one ordered lane, in flight twice).
                        log.debug("unit %s lost its lease: deliveries %s dropped unsent",
                                  token, [lost.delivery_id for lost in todo])
                        for lost in todo:
                            self._held.pop(lost.delivery_id, None)
                        todo.clear()
                        break
                    lease_until = renewed
                try:
                    # Written only while the lease outlasts the request (``send_lease_s``),
                    # checked just before the write: a worker that was frozen, or slow,
                    # since the renewal above renews again instead of sending late.
                    result = await self._attempt(job, deadline,
                                                 lease_until - policy.send_lease_s)
                except _LeaseShort:
                    log.debug("unit %s: too little lease left to write delivery %d; renewing",
                              token, job.delivery_id)
                    lease_until = 0.0  # renew (or find the lane taken) before trying again
                    continue
                except Exception as exc:
                    # Not given back as due now (a delivery that crashes every time would
                    # spin): a failed attempt, retried on the schedule.
                    log.exception("webhook delivery %d crashed", job.delivery_id)
                    result = await self._crashed(job, exc)
                todo.popleft()
                sent += 1
                self._finish(job, result)
                if job.ordered and result.status not in ("succeeded", "failed"):
                    break  # head-of-line: the rest of the lane waits behind this delivery
                if loose:
                    if len(todo) > policy.refill_at:
                        asked = False  # more came: ask again when these run out
                    elif not asked and sent + len(todo) < policy.unit_max_rows:
                        asked = True
                        self._refill_wanted[token] = job.url
                        self.wake()
        except BaseException:
            ended = False
            raise
        else:
            ended = True
        finally:
            # No await since the loop ended: rows given to this token from now on start a
            # task of their own (``_cycle``).
            self._refilling.pop(token, None)
            self._refill_wanted.pop(token, None)
            self._repointed.pop(token, None)
            deadline.close()
            # Whatever was not sent (cancelled at shutdown, or held behind a retry) is
            # given back, due now; it never stays held in memory.
            now = time.time()
            for job in todo:
                self._finish(job, Result(job.delivery_id, RELEASE, job.attempt_count, now,
                                         None, token=job.token))
            self.wake()  # its slot (and lane) is free once the cycle records it
        if ended:
            await self._keep_until_recorded(token, lease_until)

    async def _keep_until_recorded(self, token: str, lease_until: float) -> None:
        """Keep the unit's lease until its results are written. A result waiting in the
        write batch (a busy cycle, a claim that failed and is tried again) is still leased
        in the store: were the lease to run out first, another worker, or this one, would
        take the row and send it again, though it was answered."""
        policy = self._policy
        while self._unrecorded.get(token):
            recorded = self._recorded
            wait = lease_until - policy.renew_at_s - time.time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(recorded.wait(), wait)
                continue
            renewed = time.time() + policy.lease_s
            try:
                kept = await self._claimer.keep(token, renewed)
            except Exception as exc:
                # A store outage, or this worker's own transaction ended by the server: try
                # again while the lease lasts (a result lost with it is sent again).
                log.debug("keeping the lease of unit %s failed: %s", token, exc)
                if time.time() >= lease_until:
                    return
                kept = set()
            if kept:
                lease_until = renewed
            elif self._unrecorded.get(token):
                # Nothing renewed: the renewal failed, this worker's cycle is writing these
                # results (their rows are locked: no other claim takes them), or the lease
                # is lost (the write will change nothing). Wait a little for the write.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(recorded.wait(), policy.send_margin_s)

    def _finish(self, job: Job, result: Result) -> None:
        if self._held.pop(job.delivery_id, None) is None:
            return
        result.ordered = job.ordered
        self._results.append(result)
        if result.token:
            self._unrecorded.setdefault(result.token, set()).add(result.delivery_id)
        self._wake.set()

    async def _attempt(self, job: Job, deadline: Deadline | None = None,
                       start_by: float | None = None) -> Result:
        now = time.time()
        meta = await self._simulations.get(job.simulation_id)
        if meta is None:
            return Result(job.delivery_id, "failed", job.attempt_count, now,
                          "simulation deleted before delivery", token=job.token)
        if meta.webhook_disabled:
            return Result(job.delivery_id, "disabled", job.attempt_count, now,
                          "the simulation's webhook endpoint is disabled", token=job.token)
        hook = meta.webhook
        if hook is None:
            return Result(job.delivery_id, "failed", job.attempt_count, now,
                          "cancelled: the simulation has no webhook settings any more",
                          token=job.token)
        if job.body is None:
            return Result(job.delivery_id, "failed", job.attempt_count, now,
                          f"event {job.event_id} is no longer in the log (retention)",
                          token=job.token)
        url = hook.url
        if url != job.url and self._repointed.get(job.token) != url:
            # The URL was changed after this event: it goes to the URL in force now, with
            # the simulation's waiting rows and the rest of this unit (one statement).
            await self._claimer.repoint(job.simulation_id, url, job.token)
            self._repointed[job.token] = url
        attempt = await self._sender.send(url, job.msg_id, job.body, hook.secret, deadline,
                                          start_by)
        if attempt.not_sent:
            raise _LeaseShort
        if attempt.error_class is None:  # a 2xx answer: the common case, no coroutine
            WEBHOOK_LATENCY.observe(attempt.latency_ms / 1000.0)
            self.delivered += 1
            return Result(job.delivery_id, "succeeded", job.attempt_count + 1, time.time(),
                          None, None, job.simulation_id,
                          (attempt.started_at, round(attempt.latency_ms, 3),
                           attempt.status_code, attempt.response_body), job.token)
        return await self._judge(job, url, attempt)

    async def _crashed(self, job: Job, exc: Exception) -> Result:
        """The result of an attempt that raised (a defect): a failed attempt of class
        ``other``, retried on the schedule like any failure."""
        attempt = Attempt(time.time(), 0.0, error_class=ErrorClass.OTHER,
                          error=f"internal error: {type(exc).__name__}: {exc}"[:500])
        try:
            return await self._judge(job, job.url, attempt)
        except Exception:
            log.exception("judging the crashed delivery %d failed", job.delivery_id)
            delay = self._policy.retry_schedule_s[0] if self._policy.retry_schedule_s else 60.0
            return Result(job.delivery_id, "pending", job.attempt_count + 1,
                          time.time() + delay, attempt.error, _attempt_row(attempt),
                          token=job.token)

    async def _judge(self, job: Job, url: str, attempt: Attempt) -> Result:
        """The outcome of an attempt that did not succeed: retry, fail or disable."""
        policy = self._policy
        count = job.attempt_count + 1
        row = _attempt_row(attempt)
        WEBHOOK_LATENCY.observe(attempt.latency_ms / 1000.0)
        now = time.time()
        outcome, _error_class = judge(attempt.status_code)
        error = attempt.error or "failed"
        if outcome is Verdict.DISABLE:
            WEBHOOK_ATTEMPTS.labels("disabled").inc()
            await self._disable_endpoint(
                job.simulation_id, now, f"endpoint answered 410 Gone ({url})", job.token
            )
            return Result(job.delivery_id, "disabled", count, now, error, row, token=job.token)
        try:
            since = await self._health.failed(job.simulation_id, url, now)
        except Exception:
            log.exception("recording the failure of %s failed", url)
            since = now
        if now - since >= policy.disable_after_s:
            WEBHOOK_ATTEMPTS.labels("disabled").inc()
            await self._disable_endpoint(
                job.simulation_id, now,
                f"endpoint failed continuously for {now - since:.0f} s ({url}): {error}",
                job.token,
            )
            return Result(job.delivery_id, "disabled", count, now, error, row, token=job.token)
        retry_after = attempt.retry_after_s if honours_retry_after(attempt.status_code) else None
        delay = next_delay(count, policy.retry_schedule_s, jitter=policy.retry_jitter,
                           rng=self._rng, retry_after=retry_after)
        if delay is None:
            WEBHOOK_ATTEMPTS.labels("failed").inc()
            return Result(job.delivery_id, "failed", count, now, error, row, token=job.token)
        WEBHOOK_ATTEMPTS.labels("retry").inc()
        return Result(job.delivery_id, "pending", count, now + delay, error, row,
                      token=job.token)

    async def _disable_endpoint(self, simulation_id: int, at: float, reason: str,
                                token: str) -> None:
        log.warning("disabling webhook of simulation %d: %s", simulation_id, reason)
        try:
            await self._disable(simulation_id, at, reason)
            await self._deliveries.disable_pending(simulation_id, reason, token)
            await self._health.succeeded(simulation_id)  # a re-enabled endpoint starts afresh
        except Exception:
            log.exception("disabling the webhook of simulation %d failed", simulation_id)

    # ---- maintenance ---------------------------------------------------------------------

    async def _maintenance_loop(self) -> None:
        policy = self._policy
        last_purge = time.monotonic()
        wait_s = policy.maintenance_interval_s
        while True:
            await asyncio.sleep(wait_s)
            try:
                started = time.monotonic()
                self._gauges(await self._deliveries.backlog())
                wait_s = policy.maintenance_wait_s(time.monotonic() - started)
                if time.monotonic() - last_purge >= policy.retention_interval_s:
                    last_purge = time.monotonic()
                    removed = await self.apply_retention()
                    if removed:
                        log.info("retention removed %d finished webhook deliveries", removed)
            except ServiceUnavailable as exc:  # a store outage: its engine logs it
                log.debug("webhook maintenance failed: %s", exc)
            except Exception:
                log.exception("webhook maintenance failed")

    async def apply_retention(self) -> int:
        """Remove the finished deliveries older than the retention by ``clock``; how many
        were removed."""
        return await self._deliveries.purge_older_than(self._clock() - self._policy.retention_s)

    async def _stalled_loop(self) -> None:
        """Every ``claim_hold_s``: end the store sessions of workers stopped in the middle
        of a statement with rows locked (``Claimer.end_stalled``; PostgreSQL only), so that
        no stalled worker keeps rows from the others for longer than that."""
        if not self._claimer.ends_stalled:
            return
        hold_s = self._policy.claim_hold_s
        while True:
            await asyncio.sleep(hold_s)
            try:
                ended = await self._claimer.end_stalled(hold_s)
            except ServiceUnavailable as exc:  # a store outage: its engine logs it
                log.debug("looking for stalled webhook workers failed: %s", exc)
                continue
            except Exception:
                log.exception("looking for stalled webhook workers failed")
                continue
            if ended:
                log.warning("ended %d store session(s) of a stalled process: each had waited "
                            "over %g s for its client in the middle of a statement, with "
                            "rows locked", ended, hold_s)

    def _gauges(self, backlog: Sequence[tuple[int, int, float]]) -> None:
        """The queue depth, and per simulation (the oldest few) its backlog and the age of
        its oldest undelivered event."""
        WEBHOOK_QUEUE.set(sum(count for _sim, count, _oldest in backlog))
        now = time.time()
        shown = sorted(backlog, key=lambda row: row[2])[:self._policy.backlog_metric_sims]
        WEBHOOK_BACKLOG.clear()
        WEBHOOK_OLDEST_AGE.clear()
        for sim, count, oldest in shown:
            WEBHOOK_BACKLOG.labels(str(sim)).set(count)
            WEBHOOK_OLDEST_AGE.labels(str(sim)).set(max(0.0, now - oldest))

    async def close(self) -> None:
        """Stop claiming, stop the unit tasks (they give back what they did not send), record."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        for task in [*self._tasks, *self._units]:
            task.cancel()
        for task in [*self._tasks, *list(self._units)]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._watch is not None:
            await self._watch.close()
        # Given back here, a restart need not wait out the lease.
        now = time.time()
        for job in list(self._held.values()):
            self._finish(job, Result(job.delivery_id, RELEASE, job.attempt_count, now, None,
                                     token=job.token))
        try:
            await self._recorder.record(self._results)
            _count_successes(self._results)
        except Exception:
            log.exception("recording webhook state at shutdown failed (leases will expire)")
        self._results = []


class _LeaseShort(Exception):
    """A request was not written: its unit's lease would not outlast it (``_run_unit``)."""


def _count_successes(recorded: Sequence[Result]) -> None:
    succeeded = sum(1 for result in recorded if result.status == "succeeded")
    if succeeded:
        SUCCEEDED.inc(succeeded)


def _attempt_row(attempt: Attempt) -> dict[str, Any]:
    """An attempt as the record writes it (``webhook_attempts``' columns)."""
    return {
        "started_at": attempt.started_at,
        "latency_ms": round(attempt.latency_ms, 3),
        "status_code": attempt.status_code,
        "error_class": attempt.error_class.value if attempt.error_class else None,
        "error": attempt.error,
        "response_body": attempt.response_body,
    }


__all__ = ["DisableHook", "Dispatcher"]
