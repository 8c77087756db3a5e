"""The dispatcher: claims units of due deliveries from the outbox and sends them.

Two tasks and one task per claimed unit:

* the cycle loop wakes on a bus batch holding a ``StoredEvent`` with ``has_webhook`` (this
  process appended it; its body is kept in memory for the first attempt, see ``Bodies``),
  on a finished attempt, or every ``RIDECAST_WEBHOOK_POLL_INTERVAL_S`` (1 s: rows written
  by another process, retries coming due, leases of a dead process running out). Each cycle is one
  transaction: it records the finished attempts gathered since the last one (in batches),
  then claims units (``claims.plan_units``): an ordered lane of one simulation, or an
  unordered chunk of one URL; the store counts units in flight per URL, so
  ``webhook_concurrency_per_endpoint`` holds across every worker process. What a recorded
  result frees (a lane, a slot) is claimed again in the same transaction;
* a unit task sends its deliveries one after the other, in ``event_id`` order, renewing the
  unit's lease when a slow receiver would outlast it; in an ordered lane a delivery that
  must be retried gives the rest of the lane back (head-of-line: they wait behind it); the
  task leaves the set when done, and every delivery it held is finished or given back. An
  unordered chunk running out asks the next cycle for more rows of its URL under its token
  (``Outbox.claim``'s ``extend``), up to ``UNIT_MAX_ROWS``: its slot never waits for a
  claim. Chunks that ended together waited together for the claim after them: every slot of
  the URL idle, for 50-85 ms while a busy event log held SQLite's write lock;
* the maintenance loop updates the queue-depth gauge and purges old finished deliveries;
* in a process whose bus brings no other process's rows (``ridecast worker`` on the
  in-process bus), the outbox watch wakes the cycle loop when a row is added (``watch``).

A delivery goes to the URL in force when it is sent (the simulation's current settings), not
the one in force when its event was appended; with no webhook settings left, it is
cancelled (``failed``, replayable).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..bus import Bus, BusMessage, SimulationChanged, StoredEvent
from ..config import Settings
from ..errors import ServiceUnavailable
from ..events.webhook_settings import webhook_settings
from ..metrics import WEBHOOK_ATTEMPTS, WEBHOOK_LATENCY, WEBHOOK_QUEUE
from ..store.simulations import SimulationStore
from .deadline import Deadline
from .health import EndpointHealth
from .outbox import RELEASE, Job, Outbox, Result, Unit
from .retry import Verdict, honours_retry_after, next_delay, quiet_gap, verdict
from .sender import Attempt, Sender
from .watch import OutboxWatch, newest_id_reader

log = logging.getLogger(__name__)

MAX_IN_MEMORY = 8192
UNIT_ROWS = 64  # deliveries per ordered lane's unit: one claim feeds a lane for this many
CHUNK_ROWS = 256  # at most, per unordered chunk (``claims``: a URL's backlog, in long chunks)
# An unordered chunk with this many rows left asks for more under its claim token (its slot
# is not given up): at 1,000 deliveries/s a slot, 128 ms for the claim, which took up to
# 85 ms behind a busy event log. A unit that has sent UNIT_MAX_ROWS ends instead, and its
# slot is planned afresh with every lane and URL waiting (the oldest first).
REFILL_AT = CHUNK_ROWS // 2
UNIT_MAX_ROWS = 4096
CLAIM_UNITS = 64
WRITE_BATCH = 1000
WRITE_INTERVAL_S = 0.01
SIM_CACHE_TTL_S = 2.0
BODY_CACHE_BYTES = 32 * 1024 * 1024

DisableHook = Callable[[int, float, str], Awaitable[None]]
# Successes are counted when their batch is recorded (one ``inc`` per batch: the counter's
# lock cost about 1.5 µs a delivery); the other outcomes when they are judged.
SUCCEEDED = WEBHOOK_ATTEMPTS.labels("succeeded")


@dataclass(frozen=True, slots=True)
class SimState:
    """What the sender needs to know about a simulation at send time."""

    exists: bool
    subscribed: bool
    disabled: bool
    secret: str | None
    url: str | None = None


class SimStates:
    """Current webhook state per simulation: a short TTL cache, emptied on ``SimulationChanged``.

    The TTL covers changes made by another process when the bus is in-memory.
    """

    def __init__(self, store: SimulationStore) -> None:
        self._store = store
        self._cache: dict[int, tuple[float, SimState]] = {}
        # One read per simulation at a time: when an entry runs out, every unit sending that
        # simulation's deliveries asks at once; they share the one read. At most one per
        # simulation being sent.
        self._loading: dict[int, asyncio.Future[SimState]] = {}

    def forget(self, simulation_id: int) -> None:
        self._cache.pop(simulation_id, None)

    def cached(self, simulation_id: int) -> SimState | None:
        """The state if the cache holds it and it is fresh (no coroutine per delivery)."""
        cached = self._cache.get(simulation_id)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        return None

    async def get(self, simulation_id: int) -> SimState:
        cached = self.cached(simulation_id)
        if cached is not None:
            return cached
        now = time.monotonic()
        loading = self._loading.get(simulation_id)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[SimState] = asyncio.get_running_loop().create_future()
        self._loading[simulation_id] = future
        try:
            state = await self._load(simulation_id, now)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: the waiters (if any) see it, nobody else must
            raise
        else:
            future.set_result(state)
            return state
        finally:
            del self._loading[simulation_id]

    async def _load(self, simulation_id: int, now: float) -> SimState:
        record = await self._store.get(simulation_id)
        if record is None:
            state = SimState(False, False, False, None)
        else:
            hook = webhook_settings(record.data)
            state = SimState(
                True, hook is not None, record.webhook_disabled_at is not None,
                hook.secret if hook else None, hook.url if hook else None,
            )
        self._cache[simulation_id] = (now + SIM_CACHE_TTL_S, state)
        return state


class Bodies:
    """Event bodies this process appended with a webhook, by ``event_id``, for the first
    attempt of their delivery: a claim then reads no body back from the log. Bounded by
    bytes, oldest out first; a body taken for a send is dropped (a retry reads it back)."""

    def __init__(self, limit_bytes: int = BODY_CACHE_BYTES) -> None:
        self._limit = limit_bytes
        self._size = 0
        self._bodies: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._bodies)

    @property
    def mapping(self) -> dict[int, bytes]:
        return self._bodies

    def add(self, event_id: int, body: bytes) -> None:
        if event_id in self._bodies:
            return
        self._bodies[event_id] = body
        self._size += len(body)
        while self._size > self._limit and self._bodies:
            oldest = next(iter(self._bodies))
            self._size -= len(self._bodies.pop(oldest))

    def drop(self, event_id: int) -> None:
        body = self._bodies.pop(event_id, None)
        if body is not None:
            self._size -= len(body)


class Dispatcher:
    """Delivers the outbox; start with ``start()``, stop with ``close()``."""

    def __init__(
        self,
        settings: Settings,
        outbox: Outbox,
        sender: Sender,
        store: SimulationStore,
        bus: Bus,
        disable: DisableHook,
        *,
        rng: random.Random | None = None,
        watch_interval_s: float | None = None,
    ) -> None:
        self._settings = settings
        # A process whose bus brings no other process's rows (``ridecast worker`` on the
        # in-process bus) watches the outbox for them instead (``watch``).
        self._watch = (None if watch_interval_s is None else
                       OutboxWatch(newest_id_reader(outbox), self.wake,
                                   interval_s=watch_interval_s))
        self._outbox = outbox
        self._sender = sender
        self._sims = SimStates(store)
        self._bus = bus
        self._disable = disable
        self._rng = rng or random.Random()
        self._wake = asyncio.Event()
        # Something may be claimable: new events, a unit ended (a slot or a lane is free),
        # a wake-up from outside, the poll. Otherwise a cycle only records results.
        self._claim_due = True
        # Look for unordered rows whose lease ran out (a dead worker's): on the poll only, as
        # they have waited a whole lease already (see ``Outbox.claim``).
        self._stale_due = True
        self._results: list[Result] = []
        self._health = EndpointHealth(
            outbox.engine,
            quiet_gap_s=quiet_gap(
                settings.webhook_retry_schedule_s, jitter=settings.webhook_retry_jitter,
                timeout_s=settings.webhook_timeout_s, lease_s=settings.webhook_lease_s,
            ),
        )
        self._bodies = Bodies()
        self._tasks: list[asyncio.Task[None]] = []
        self._units: set[asyncio.Task[None]] = set()
        self._unsubscribe: Callable[[], None] | None = None
        self._held: dict[int, Job] = {}  # claimed here and neither finished nor given back
        # Unordered units running out: token -> URL, asked and not yet sent to a claim; and
        # token -> the deliveries left to the unit's running task (rows given to the token
        # are appended there; ``_run_unit``).
        self._refill_wanted: dict[str, str] = {}
        self._refilling: dict[str, deque[Job]] = {}
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
        ]
        if self._watch is not None:
            self._tasks.append(asyncio.create_task(self._watch.run(),
                                                   name="ridecast-webhook-outbox-watch"))

    def wake(self) -> None:
        """Look for due deliveries now (after an append, a retry request, a finished attempt)."""
        self._claim_due = True
        self._wake.set()

    def _on_bus(self, messages: Sequence[BusMessage]) -> None:
        woken = False
        for message in messages:
            if isinstance(message, StoredEvent):
                if message.has_webhook:
                    self._bodies.add(message.event_id, message.body)
                    woken = True
            elif isinstance(message, SimulationChanged):
                self._sims.forget(message.simulation_id)
        if woken:
            self.wake()  # one wake-up per bus batch (a commit batch or more)

    # ---- claiming ------------------------------------------------------------------------

    async def _cycle_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(),
                                       timeout=self._settings.webhook_poll_interval_s)
            except TimeoutError:
                self._claim_due = True  # rows of other processes, retries coming due
                self._stale_due = True  # and unordered rows whose lease ran out
            if self._results and len(self._results) < WRITE_BATCH and not self._claim_due:
                # Only results to write: let a batch gather, one commit for many. A freed
                # slot or new rows are claimed at once (with what has gathered): a slot
                # idle for the interval is a receiver's connection idle.
                await asyncio.sleep(WRITE_INTERVAL_S)
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
                await asyncio.sleep(self._settings.webhook_poll_interval_s)

    async def _cycle(self) -> None:
        """Record what finished, then claim, in one transaction; again while it fills up."""
        while True:
            batch, self._results = self._results[:WRITE_BATCH], self._results[WRITE_BATCH:]
            want = min(CLAIM_UNITS, (MAX_IN_MEMORY - self.in_memory) // CHUNK_ROWS)
            if not self._claim_due:
                want = 0
            self._claim_due = False
            extend = list(self._refill_wanted.items())
            self._refill_wanted.clear()
            if self.in_memory + CHUNK_ROWS > MAX_IN_MEMORY:
                extend = []  # the units run out and end; their slots are planned afresh
            if want <= 0 and not batch and not extend:
                return  # a finished unit wakes us again
            extend_tokens = {token for token, _url in extend}
            try:
                units = await self._outbox.claim(
                    max_units=max(want, 0), unit_rows=UNIT_ROWS, chunk_rows=CHUNK_ROWS,
                    per_endpoint=self._settings.webhook_concurrency_per_endpoint,
                    lease_s=self._settings.webhook_lease_s, record=batch,
                    bodies=self._bodies.mapping, stale=self._stale_due and want > 0,
                    extend=extend,
                )
            except Exception:
                self._results = batch + self._results
                self._claim_due = True
                raise
            _count_successes(batch)
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
            if not self._claim_due and len(self._results) < WRITE_BATCH:
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
            await self._outbox.release([job.delivery_id for job in jobs])
            return
        self._hold(jobs)
        task = asyncio.create_task(
            self._run_unit(Unit(unit.token, unit.lease_until, jobs)),
            name=f"ridecast-webhook-unit-{jobs[0].simulation_id}",
        )
        self._units.add(task)
        task.add_done_callback(self._units.discard)

    def _hold(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self._held[job.delivery_id] = job
            self._bodies.drop(job.event_id)

    # ---- sending -------------------------------------------------------------------------

    async def _run_unit(self, unit: Unit) -> None:
        """Send the unit's deliveries in order; see the module docstring."""
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
                margin = min(2 * self._settings.webhook_timeout_s,
                             self._settings.webhook_lease_s / 2)
                if time.time() + margin > lease_until:
                    renewed = time.time() + self._settings.webhook_lease_s
                    if not await self._outbox.renew(
                        unit.token, [j.delivery_id for j in todo], renewed
                    ):
                        # The lease ran out and another worker holds these now.
                        for lost in todo:
                            self._held.pop(lost.delivery_id, None)
                        todo.clear()
                        break
                    lease_until = renewed
                try:
                    result = await self._attempt(job, deadline)
                except Exception:
                    log.exception("webhook delivery %d crashed", job.delivery_id)
                    result = Result(job.delivery_id, RELEASE, job.attempt_count, time.time(),
                                    None)
                todo.popleft()
                sent += 1
                self._finish(job, result)
                if job.ordered and result.status not in ("succeeded", "failed"):
                    break  # head-of-line: the rest of the lane waits behind this delivery
                if loose:
                    if len(todo) > REFILL_AT:
                        asked = False  # more came: ask again when these run out
                    elif not asked and sent + len(todo) < UNIT_MAX_ROWS:
                        asked = True
                        self._refill_wanted[token] = job.url
                        self.wake()
        finally:
            # No await since the loop ended: rows given to this token from now on start a
            # task of their own (``_cycle``).
            self._refilling.pop(token, None)
            self._refill_wanted.pop(token, None)
            deadline.close()
            # Whatever was not sent (cancelled at shutdown, or held behind a retry) is
            # given back, due now; it never stays held in memory.
            now = time.time()
            for job in todo:
                self._finish(job, Result(job.delivery_id, RELEASE, job.attempt_count, now, None))
            self.wake()  # its slot (and lane) is free once the cycle records it

    def _finish(self, job: Job, result: Result) -> None:
        if self._held.pop(job.delivery_id, None) is None:
            return
        self._results.append(result)
        self._wake.set()

    async def _attempt(self, job: Job, deadline: Deadline | None = None) -> Result:
        now = time.time()
        state = self._sims.cached(job.simulation_id) or await self._sims.get(job.simulation_id)
        if not state.exists:
            return Result(job.delivery_id, "failed", job.attempt_count, now,
                          "simulation deleted before delivery")
        if state.disabled:
            return Result(job.delivery_id, "disabled", job.attempt_count, now,
                          "the simulation's webhook endpoint is disabled")
        if state.url is None:
            return Result(job.delivery_id, "failed", job.attempt_count, now,
                          "cancelled: the simulation has no webhook settings any more")
        if job.body is None:
            return Result(job.delivery_id, "failed", job.attempt_count, now,
                          f"event {job.event_id} is no longer in the log (retention)")
        url = state.url
        if url != job.url:
            # The URL was changed after this event: it goes to the URL in force now.
            await self._outbox.repoint(job.simulation_id, url)
        attempt = await self._sender.send(url, job.msg_id, job.body, state.secret, deadline)
        if attempt.error_class is None:  # a 2xx answer: the common case, no coroutine
            WEBHOOK_LATENCY.observe(attempt.latency_ms / 1000.0)
            self.delivered += 1
            return Result(job.delivery_id, "succeeded", job.attempt_count + 1, time.time(),
                          None, None, job.simulation_id,
                          (attempt.started_at, round(attempt.latency_ms, 3),
                           attempt.status_code, attempt.response_body))
        return await self._judge(job, url, attempt)

    async def _judge(self, job: Job, url: str, attempt: Attempt) -> Result:
        """The outcome of an attempt that did not succeed (no answer, or not a 2xx, which
        ``verdict`` and ``error_class_of_status`` agree on): retry, fail or disable."""
        count = job.attempt_count + 1
        row = _attempt_row(attempt)
        WEBHOOK_LATENCY.observe(attempt.latency_ms / 1000.0)
        now = time.time()
        outcome = verdict(attempt.status_code)
        error = attempt.error or "failed"
        if outcome is Verdict.DISABLE:
            WEBHOOK_ATTEMPTS.labels("disabled").inc()
            await self._disable_endpoint(
                job.simulation_id, now, f"endpoint answered 410 Gone ({url})"
            )
            return Result(job.delivery_id, "disabled", count, now, error, row)
        try:
            since = await self._health.failed(job.simulation_id, url, now)
        except Exception:
            log.exception("recording the failure of %s failed", url)
            since = now
        if now - since >= self._settings.webhook_disable_after_s:
            WEBHOOK_ATTEMPTS.labels("disabled").inc()
            await self._disable_endpoint(
                job.simulation_id, now,
                f"endpoint failed continuously for {now - since:.0f} s ({url}): {error}",
            )
            return Result(job.delivery_id, "disabled", count, now, error, row)
        retry_after = attempt.retry_after_s if honours_retry_after(attempt.status_code) else None
        delay = next_delay(
            count, self._settings.webhook_retry_schedule_s,
            jitter=self._settings.webhook_retry_jitter, rng=self._rng, retry_after=retry_after,
        )
        if delay is None:
            WEBHOOK_ATTEMPTS.labels("failed").inc()
            return Result(job.delivery_id, "failed", count, now, error, row)
        WEBHOOK_ATTEMPTS.labels("retry").inc()
        return Result(job.delivery_id, "pending", count, now + delay, error, row)

    async def _disable_endpoint(self, simulation_id: int, at: float, reason: str) -> None:
        log.warning("disabling webhook of simulation %d: %s", simulation_id, reason)
        self._sims.forget(simulation_id)
        try:
            await self._disable(simulation_id, at, reason)
            await self._outbox.disable_pending(simulation_id, reason)
            await self._health.succeeded(simulation_id)  # a re-enabled endpoint starts afresh
        except Exception:
            log.exception("disabling the webhook of simulation %d failed", simulation_id)

    # ---- recording -----------------------------------------------------------------------

    async def _maintenance_loop(self) -> None:
        last_purge = time.monotonic()
        while True:
            await asyncio.sleep(5.0)
            try:
                WEBHOOK_QUEUE.set(await self._outbox.depth())
                if time.monotonic() - last_purge >= self._settings.retention_interval_s:
                    last_purge = time.monotonic()
                    cutoff = time.time() - self._settings.event_retention_s
                    removed = await self._outbox.purge_older_than(cutoff)
                    if removed:
                        log.info("retention removed %d finished webhook deliveries", removed)
            except ServiceUnavailable as exc:  # a store outage: its engine logs it
                log.debug("webhook maintenance failed: %s", exc)
            except Exception:
                log.exception("webhook maintenance failed")

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
            self._finish(job, Result(job.delivery_id, RELEASE, job.attempt_count, now, None))
        try:
            await self._outbox.record(self._results)
            _count_successes(self._results)
        except Exception:
            log.exception("recording webhook state at shutdown failed (leases will expire)")
        self._results = []


def _count_successes(recorded: Sequence[Result]) -> None:
    succeeded = sum(1 for result in recorded if result.status == "succeeded")
    if succeeded:
        SUCCEEDED.inc(succeeded)


def _attempt_row(attempt: Attempt) -> dict[str, Any]:
    """An attempt as the outbox records it (``webhook_attempts``' columns)."""
    return {
        "started_at": attempt.started_at,
        "latency_ms": round(attempt.latency_ms, 3),
        "status_code": attempt.status_code,
        "error_class": attempt.error_class.value if attempt.error_class else None,
        "error": attempt.error,
        "response_body": attempt.response_body,
    }


__all__ = ["Bodies", "Dispatcher", "SimState", "SimStates"]
