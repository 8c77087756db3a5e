"""The claim cycle: when this process writes results and claims units, and its retry heap.

``ClaimCycle`` owns when the next cycle runs: the wake-up event, whether something may be
claimable (``wake``), whether the next claim looks for a dead worker's run-out leases (on the
poll only), and the heap of retries this process scheduled that come due before the next
poll. Its loop wakes on ``wake`` (new events, a unit that ended or runs out of rows), on
``nudge`` (a result to write), when such a retry comes due, and every ``poll_interval_s``
however busy (rows written by another process, their retries coming due, leases of a dead or
stalled worker running out). Each cycle is one transaction (``claimer``): it records the
results the ``UnitRunner`` gathered, then claims units (``claims.plan_units``) and hands
them to the runner. The store counts units in flight per URL, so the per-endpoint limit
holds across every worker process.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
from collections.abc import Sequence

from ..errors import ServiceUnavailable
from ..metrics import WEBHOOK_ATTEMPTS
from .bodies import Bodies
from .claimer import Claimer
from .isolate import record_apart, refuses_row
from .jobs import Result
from .policy import DeliveryPolicy
from .recorder import Recorder
from .units import UnitRunner

log = logging.getLogger(__name__)

# Successes are counted when their batch is recorded (one ``inc`` per batch); the other
# outcomes when they are judged.
SUCCEEDED = WEBHOOK_ATTEMPTS.labels("succeeded")
# Retries due within this much of each other wake the cycle once.
RETRY_WAKE_RESOLUTION_S = 0.01


class ClaimCycle:
    """Writes results and claims units when due (see the module docstring)."""

    def __init__(self, policy: DeliveryPolicy, *, claimer: Claimer, recorder: Recorder,
                 bodies: Bodies, runner: UnitRunner) -> None:
        self._policy = policy
        self._claimer = claimer
        self._recorder = recorder
        self._bodies = bodies
        self._runner = runner
        self._wake = asyncio.Event()
        # Something may be claimable: new events, a unit ended (a slot or a lane is free),
        # a wake-up from outside, the poll. Otherwise a cycle only records results.
        self._claim_due = True
        # Look for unordered rows whose lease ran out (a dead worker's): on the poll only, as
        # they have waited a whole lease already.
        self._stale_due = True
        # When retries this process scheduled come due before the next poll (a heap of
        # times rounded up to RETRY_WAKE_RESOLUTION_S, and the same as a set).
        self._retries: list[float] = []
        self._retry_steps: set[float] = set()

    def wake(self) -> None:
        """Look for due deliveries now (after an append, a retry request, a finished unit)."""
        self._claim_due = True
        self._wake.set()

    def nudge(self) -> None:
        """A result waits to be written: run a cycle, claiming only if already due."""
        self._wake.set()

    async def run(self) -> None:
        """The cycle loop: wait for a reason to cycle, then cycle; never returns."""
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
            waiting = self._runner.results_waiting
            if waiting and waiting < policy.write_batch and not self._claim_due:
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
        runner = self._runner
        while True:
            batch = runner.take_results(policy.write_batch)
            room = policy.max_in_memory - runner.in_memory
            want = min(policy.claim_units, room // policy.chunk_rows) if self._claim_due else 0
            self._claim_due = False
            extend = runner.take_refills()
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
                    runner.put_back(batch)
                    raise
                # One result the store refuses must not hold back the others
                # (webhooks/isolate.py); the claim is tried again at once.
                apart = await record_apart(self._recorder.record, batch)
                runner.put_back(apart.pending)
                count_successes(apart.written)
                runner.written(apart.written + apart.refused)
                self._schedule_retries(apart.written)
                if not apart.refused:
                    raise  # the results were not the cause: the claim itself failed
                continue
            count_successes(batch)
            runner.written(batch)
            self._schedule_retries(batch)
            if want > 0:
                self._stale_due = False
            new = 0
            for unit in units:
                if await runner.place(unit):
                    new += unit.token not in extend_tokens
            if new == want > 0:
                self._claim_due = True  # there may be more
            if not self._claim_due and runner.results_waiting < policy.write_batch:
                return  # the next finished attempt or bus batch wakes the loop

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


def count_successes(recorded: Sequence[Result]) -> None:
    """Count the successes of a batch just recorded (``SUCCEEDED``)."""
    succeeded = sum(1 for result in recorded if result.status == "succeeded")
    if succeeded:
        SUCCEEDED.inc(succeeded)


__all__ = ["RETRY_WAKE_RESOLUTION_S", "ClaimCycle", "count_successes"]
