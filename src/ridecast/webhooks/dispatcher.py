"""The dispatcher: delivers the outbox by composing a claim cycle and a unit runner.

``Dispatcher`` owns the process's webhook tasks and their lifetime (``start``, ``close``),
and the bus subscription; the state lives in its two parts:

* ``cycle.ClaimCycle``, when to write results and claim units (its wake-ups, the poll, the
  heap of retries coming due): each cycle is one transaction (``claimer``) that records
  what finished and claims units of due deliveries (an ordered lane of one simulation, or
  an unordered chunk of one URL);
* ``units.UnitRunner``, the units claimed: one task per unit sends its deliveries,
  renews its lease, gathers the results for the next cycle and keeps the lease until they
  are written.

Beside them run the maintenance loop (the queue gauges: depth; per simulation, the backlog
and the age of its oldest undelivered event; and the purge of old finished deliveries), the
loop that ends stalled store sessions (PostgreSQL), and in a process whose bus brings no
other process's rows (``ridecast worker`` on the in-process bus), the outbox watch, which
wakes the cycle when a row is added (``watch``). A bus batch holding a ``StoredEvent`` with
``has_webhook`` (this process appended it) wakes the cycle too, its body kept for the first
attempt (``bodies``).

Every collaborator comes from ``app.py``; the numbers come from the ``DeliveryPolicy``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence

from ..bus import Bus, BusMessage, StoredEvent
from ..errors import ServiceUnavailable
from ..metrics import WEBHOOK_BACKLOG, WEBHOOK_OLDEST_AGE, WEBHOOK_QUEUE
from ..ports import SimulationDirectory
from .bodies import Bodies
from .claimer import Claimer
from .cycle import ClaimCycle, count_successes
from .deliverylog import DeliveryLog
from .health import EndpointHealth
from .policy import DeliveryPolicy
from .recorder import Recorder
from .sender import Sender
from .units import DisableHook, UnitRunner
from .watch import OutboxWatch

log = logging.getLogger(__name__)


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
        self._bodies = bodies
        self._bus = bus
        self._watch = watch
        self._runner = UnitRunner(
            policy, claimer=claimer, deliveries=deliveries, sender=sender,
            simulations=simulations, health=health, bodies=bodies, disable=disable,
            wake=self.wake, nudge=self._nudge, rng=rng)
        self._cycle = ClaimCycle(policy, claimer=claimer, recorder=recorder, bodies=bodies,
                                 runner=self._runner)
        self._tasks: list[asyncio.Task[None]] = []
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def in_memory(self) -> int:
        """Deliveries claimed by this dispatcher and not finished yet."""
        return self._runner.in_memory

    @property
    def units_running(self) -> int:
        return len(self._runner.tasks)

    @property
    def delivered(self) -> int:
        """Deliveries this dispatcher sent that succeeded."""
        return self._runner.delivered

    def start(self) -> None:
        self._unsubscribe = self._bus.subscribe(self._on_bus)
        # The first cycle at once: what is due already (a restart's backlog, the rows a
        # worker started beside) does not wait for the poll.
        self._cycle.wake()
        self._tasks = [
            asyncio.create_task(self._cycle.run(), name="ridecast-webhook-cycle"),
            asyncio.create_task(self._maintenance_loop(), name="ridecast-webhook-maintenance"),
            asyncio.create_task(self._stalled_loop(), name="ridecast-webhook-stalled"),
        ]
        if self._watch is not None:
            self._tasks.append(asyncio.create_task(self._watch.run(self.wake),
                                                   name="ridecast-webhook-outbox-watch"))

    def wake(self) -> None:
        """Look for due deliveries now (after an append, a retry request, a finished attempt)."""
        self._cycle.wake()

    def _nudge(self) -> None:
        self._cycle.nudge()

    def _on_bus(self, messages: Sequence[BusMessage]) -> None:
        woken = False
        for message in messages:
            if isinstance(message, StoredEvent) and message.has_webhook:
                self._bodies.add(message.event_id, message.body)
                woken = True
        if woken:
            self.wake()  # one wake-up per bus batch (a commit batch or more)

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
        units = self._runner.tasks
        for task in [*self._tasks, *units]:
            task.cancel()
        for task in [*self._tasks, *units]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._watch is not None:
            await self._watch.close()
        # Given back here, a restart need not wait out the lease.
        self._runner.give_back_all()
        results = self._runner.take_results()
        try:
            await self._recorder.record(results)
            count_successes(results)
        except Exception:
            log.exception("recording webhook state at shutdown failed (leases will expire)")


__all__ = ["DisableHook", "Dispatcher"]
