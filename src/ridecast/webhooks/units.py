"""The unit runner: one task per claimed unit, sending its deliveries and keeping its lease.

``UnitRunner`` owns what this process holds of the units it claimed: the deliveries held in
memory (claimed, neither finished nor given back), the unit tasks, the results gathered for
the next write and the units that keep their lease until that write, the unordered units
running out of rows (asked for more, and the queue their task sends from), and the URL each
unit was repointed to. It decides nothing about when to claim (``cycle``): it tells the
cycle when a slot may be free (``wake``) and when results wait to be written (``nudge``).

A unit task sends its deliveries one after the other, in ``event_id`` order, renewing the
unit's lease when a slow receiver would outlast it; a unit that finds its lease taken by
another worker drops what it holds, unsent. In an ordered lane a delivery that must be
retried gives the rest of the lane back (head-of-line). An unordered chunk running out asks
the next claim for more rows of its URL under its token, so its slot never waits for a
claim. A delivery goes to the URL in force when it is sent (the simulation's current
settings, read through the ``SimulationDirectory`` port), not the one in force when its
event was appended; with no webhook settings left, it is cancelled (``failed``, replayable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..metrics import WEBHOOK_ATTEMPTS, WEBHOOK_LATENCY
from ..ports import SimulationDirectory
from .bodies import Bodies
from .claimer import Claimer
from .deadline import Deadline
from .deliverylog import DeliveryLog
from .health import EndpointHealth
from .jobs import RELEASE, Job, Result, Unit
from .policy import DeliveryPolicy
from .retry import ErrorClass, Verdict, honours_retry_after, judge, next_delay
from .sender import Attempt, Sender

log = logging.getLogger(__name__)

DisableHook = Callable[[int, float, str], Awaitable[None]]


class UnitRunner:
    """Runs claimed units (see the module docstring)."""

    def __init__(
        self,
        policy: DeliveryPolicy,
        *,
        claimer: Claimer,
        deliveries: DeliveryLog,
        sender: Sender,
        simulations: SimulationDirectory,
        health: EndpointHealth,
        bodies: Bodies,
        disable: DisableHook,
        wake: Callable[[], None],
        nudge: Callable[[], None],
        rng: random.Random | None = None,
    ) -> None:
        self._policy = policy
        self._claimer = claimer
        self._deliveries = deliveries
        self._sender = sender
        self._simulations = simulations
        self._health = health
        self._bodies = bodies
        self._disable = disable
        # ``wake``: something may be claimable (a slot or a lane is free, a chunk runs out);
        # ``nudge``: a result waits to be written.
        self._wake = wake
        self._nudge = nudge
        self._rng = rng or random.Random()
        self._results: list[Result] = []
        # Claim token -> the deliveries whose result waits in ``_results`` or in a cycle
        # writing it; their unit keeps the lease until the write (``_keep_until_recorded``).
        self._unrecorded: dict[str, set[int]] = {}
        self._recorded = asyncio.Event()  # set (and replaced) after each write of results
        self._units: set[asyncio.Task[None]] = set()
        self._held: dict[int, Job] = {}  # claimed here and neither finished nor given back
        # Unordered units running out: token -> URL, asked and not yet sent to a claim; and
        # token -> the deliveries left to the unit's running task (rows given to the token
        # are appended there; ``_run``).
        self._refill_wanted: dict[str, str] = {}
        self._refilling: dict[str, deque[Job]] = {}
        # Claim token -> the URL its rows were repointed to (one statement per unit and URL).
        self._repointed: dict[str, str] = {}
        self.delivered = 0

    @property
    def in_memory(self) -> int:
        """Deliveries claimed here and not finished yet."""
        return len(self._held)

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The unit tasks running now."""
        return list(self._units)

    # ---- what the cycle takes and gives back -----------------------------------------

    @property
    def results_waiting(self) -> int:
        """Results gathered and not yet taken for a write."""
        return len(self._results)

    def take_results(self, count: int | None = None) -> list[Result]:
        """The first ``count`` results gathered (all with None), for the cycle to write."""
        if count is None:
            batch, self._results = self._results, []
        else:
            batch, self._results = self._results[:count], self._results[count:]
        return batch

    def put_back(self, batch: Sequence[Result]) -> None:
        """Results taken whose write failed: first in line for the next one."""
        self._results = [*batch, *self._results]

    def take_refills(self) -> list[tuple[str, str]]:
        """The unordered units running out (claim token, URL) asked since the last call."""
        wanted = list(self._refill_wanted.items())
        self._refill_wanted.clear()
        return wanted

    def written(self, batch: Sequence[Result]) -> None:
        """``batch`` is in the store: its units need not keep their leases for it."""
        for result in batch:
            ids = self._unrecorded.get(result.token)
            if ids is not None:
                ids.discard(result.delivery_id)
                if not ids:
                    del self._unrecorded[result.token]
        recorded, self._recorded = self._recorded, asyncio.Event()
        recorded.set()

    async def place(self, unit: Unit) -> bool:
        """Run a claimed unit: more rows for a running unit go to its task; any other
        starts a task of its own. True if it was a new unit."""
        todo = self._refilling.get(unit.token)
        if todo is not None:  # more for a running unit: its task sends them next
            self._hold(unit.jobs)
            todo.extend(unit.jobs)
            return False
        await self.start(unit)
        return True

    async def start(self, unit: Unit) -> None:
        """Start a task sending ``unit``."""
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
            self._run(Unit(unit.token, unit.lease_until, jobs)),
            name=f"ridecast-webhook-unit-{jobs[0].simulation_id}",
        )
        self._units.add(task)
        task.add_done_callback(self._units.discard)

    def give_back_all(self) -> None:
        """Every delivery still held, as a release (due now): at shutdown, so a restart need
        not wait out the lease."""
        now = time.time()
        for job in list(self._held.values()):
            self._finish(job, Result(job.delivery_id, RELEASE, job.attempt_count, now, None,
                                     token=job.token))

    def _hold(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self._held[job.delivery_id] = job
            self._bodies.drop(job.event_id)

    # ---- sending -------------------------------------------------------------------------

    async def _run(self, unit: Unit) -> None:
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
                        self._wake()
        except BaseException:
            ended = False
            raise
        else:
            ended = True
        finally:
            # No await since the loop ended: rows given to this token from now on start a
            # task of their own (``place``).
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
            self._wake()  # its slot (and lane) is free once the cycle records it
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
        self._nudge()

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


class _LeaseShort(Exception):
    """A request was not written: its unit's lease would not outlast it (``_run``)."""


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


__all__ = ["DisableHook", "UnitRunner"]
