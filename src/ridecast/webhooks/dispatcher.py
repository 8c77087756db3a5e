"""The dispatcher: claims due deliveries from the outbox and sends them, per endpoint.

Three tasks and a set of endpoint workers:

* the claim loop wakes on a bus ``StoredEvent`` with ``has_webhook`` (this process appended
  it), on a finished attempt, or every ``POLL_INTERVAL_S`` (rows written by another process,
  retries coming due, leases of a dead process running out), and leases due rows in batches;
* each endpoint (one target URL) has its own queue and at most
  ``webhook_concurrency_per_endpoint`` workers: a slow or dead endpoint only ever holds its
  own workers, and the claim loop skips endpoints whose queue is full instead of waiting;
* the writer records finished attempts in batches, one transaction per batch;
* the maintenance loop updates the queue-depth gauge and purges old finished deliveries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..bus import Bus, BusMessage, SimulationChanged, StoredEvent
from ..config import Settings
from ..events.webhook_settings import webhook_settings
from ..metrics import WEBHOOK_ATTEMPTS, WEBHOOK_LATENCY, WEBHOOK_QUEUE
from ..store.simulations import SimulationStore
from .outbox import Job, Outbox, Result
from .retry import Verdict, honours_retry_after, next_delay, verdict
from .sender import Attempt, Sender

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 1.0
CLAIM_BATCH = 512
MAX_IN_MEMORY = 8192
WRITE_BATCH = 1000
WRITE_INTERVAL_S = 0.01
SIM_CACHE_TTL_S = 2.0

DisableHook = Callable[[int, float, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SimState:
    """What the sender needs to know about a simulation at send time."""

    exists: bool
    subscribed: bool
    disabled: bool
    secret: str | None


class SimStates:
    """Current webhook state per simulation: a short TTL cache, emptied on ``SimulationChanged``.

    The TTL covers changes made by another process when the bus is in-memory.
    """

    def __init__(self, store: SimulationStore) -> None:
        self._store = store
        self._cache: dict[int, tuple[float, SimState]] = {}

    def forget(self, simulation_id: int) -> None:
        self._cache.pop(simulation_id, None)

    async def get(self, simulation_id: int) -> SimState:
        now = time.monotonic()
        cached = self._cache.get(simulation_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        record = await self._store.get(simulation_id)
        if record is None:
            state = SimState(False, False, False, None)
        else:
            hook = webhook_settings(record.data)
            state = SimState(
                True, hook is not None, record.webhook_disabled_at is not None,
                hook.secret if hook else None,
            )
        self._cache[simulation_id] = (now + SIM_CACHE_TTL_S, state)
        return state


class Endpoint:
    """One target URL: a queue of claimed jobs and up to ``concurrency`` workers."""

    def __init__(self, url: str, concurrency: int, work: Callable[[Job], Awaitable[None]]) -> None:
        self.url = url
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.busy = 0
        self.current: set[Job] = set()
        self._concurrency = concurrency
        self._work = work
        self._workers: set[asyncio.Task[None]] = set()

    @property
    def backlog(self) -> int:
        return self.queue.qsize() + self.busy

    def put(self, job: Job) -> None:
        self.queue.put_nowait(job)
        workers = len(self._workers)
        if workers < self._concurrency and workers < self.queue.qsize() + self.busy:
            task = asyncio.create_task(self._run(), name=f"ridecast-webhook-{self.url}")
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)

    async def _run(self) -> None:
        # A worker exits when its queue stays empty, so idle endpoints cost nothing.
        while True:
            try:
                job = await asyncio.wait_for(self.queue.get(), timeout=5.0)
            except TimeoutError:
                return
            self.busy += 1
            self.current.add(job)
            try:
                await self._work(job)
            except Exception:
                log.exception("webhook delivery %d crashed", job.delivery_id)
            finally:
                self.busy -= 1
                self.current.discard(job)

    async def close(self) -> list[Job]:
        """Stop the workers; returns the jobs not finished (queued or cut off mid-send)."""
        unfinished = list(self.current)
        while not self.queue.empty():
            unfinished.append(self.queue.get_nowait())
        for task in list(self._workers):
            task.cancel()
        for task in list(self._workers):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return unfinished


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
    ) -> None:
        self._settings = settings
        self._outbox = outbox
        self._sender = sender
        self._sims = SimStates(store)
        self._bus = bus
        self._disable = disable
        self._rng = rng or random.Random()
        self._endpoints: dict[str, Endpoint] = {}
        self._wake = asyncio.Event()
        self._results: list[Result] = []
        self._results_ready = asyncio.Event()
        self._failing_since: dict[int, float] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._unsubscribe: Callable[[], None] | None = None
        # Jobs queued per endpoint: enough to keep its workers busy, few enough that the
        # last one is sent before its lease runs out even when every request times out.
        per_lease = settings.webhook_lease_s / settings.webhook_timeout_s / 2
        concurrency = settings.webhook_concurrency_per_endpoint
        self._cap = max(concurrency, int(concurrency * min(per_lease, 16)))
        self._held: set[int] = set()  # delivery ids claimed and not yet finished here
        self.in_memory = 0
        self.delivered = 0

    def start(self) -> None:
        self._unsubscribe = self._bus.subscribe(self._on_bus)
        self._tasks = [
            asyncio.create_task(self._claim_loop(), name="ridecast-webhook-claim"),
            asyncio.create_task(self._write_loop(), name="ridecast-webhook-writer"),
            asyncio.create_task(self._maintenance_loop(), name="ridecast-webhook-maintenance"),
        ]

    def wake(self) -> None:
        """Look for due deliveries now (after an append, a retry request, a finished attempt)."""
        self._wake.set()

    def _on_bus(self, messages: Sequence[BusMessage]) -> None:
        for message in messages:
            if isinstance(message, StoredEvent):
                if message.has_webhook:
                    self._wake.set()
            elif isinstance(message, SimulationChanged):
                self._sims.forget(message.simulation_id)

    # ---- claiming ------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=POLL_INTERVAL_S)
            self._wake.clear()
            try:
                await self._claim_all()
            except Exception:
                log.exception("claiming webhook deliveries failed; retrying")
                await asyncio.sleep(POLL_INTERVAL_S)

    async def _claim_all(self) -> None:
        while True:
            room = MAX_IN_MEMORY - self.in_memory
            if room <= 0:
                return  # a finished attempt wakes us again
            saturated = [url for url, ep in self._endpoints.items() if ep.backlog >= self._cap]
            want = min(room, CLAIM_BATCH)
            jobs = await self._outbox.claim(
                want, lease_s=self._settings.webhook_lease_s, exclude_urls=saturated
            )
            fresh = [job for job in jobs if job.delivery_id not in self._held]
            for job in fresh:
                # A lease that ran out while the job still waits here is simply renewed
                # by the claim: the job already queued sends it, once.
                self._held.add(job.delivery_id)
                self._endpoint(job.url).put(job)
            self.in_memory += len(fresh)
            if len(jobs) < want:
                return

    def _endpoint(self, url: str) -> Endpoint:
        endpoint = self._endpoints.get(url)
        if endpoint is None:
            endpoint = Endpoint(url, self._settings.webhook_concurrency_per_endpoint, self._deliver)
            self._endpoints[url] = endpoint
        return endpoint

    # ---- sending -------------------------------------------------------------------------

    async def _deliver(self, job: Job) -> None:
        try:
            result = await self._attempt(job)
        finally:
            self.in_memory -= 1
            self._held.discard(job.delivery_id)
        self._results.append(result)
        self._results_ready.set()

    async def _attempt(self, job: Job) -> Result:
        now = time.time()
        state = await self._sims.get(job.simulation_id)
        if not state.exists:
            return Result(job.delivery_id, "failed", job.attempt_count, now,
                          "simulation deleted before delivery")
        if state.disabled:
            return Result(job.delivery_id, "disabled", job.attempt_count, now,
                          "the simulation's webhook endpoint is disabled")
        if job.body is None:
            return Result(job.delivery_id, "failed", job.attempt_count, now,
                          f"event {job.event_id} is no longer in the log (retention)")
        attempt = await self._sender.send(job.url, job.msg_id, job.body, state.secret)
        return await self._judge(job, attempt)

    async def _judge(self, job: Job, attempt: Attempt) -> Result:
        count = job.attempt_count + 1
        row = {
            "started_at": attempt.started_at,
            "latency_ms": round(attempt.latency_ms, 3),
            "status_code": attempt.status_code,
            "error_class": attempt.error_class.value if attempt.error_class else None,
            "error": attempt.error,
            "response_body": attempt.response_body,
        }
        WEBHOOK_LATENCY.observe(attempt.latency_ms / 1000.0)
        now = time.time()
        outcome = verdict(attempt.status_code)
        if outcome is Verdict.SUCCEEDED:
            WEBHOOK_ATTEMPTS.labels("succeeded").inc()
            self._failing_since.pop(job.simulation_id, None)
            self.delivered += 1
            return Result(job.delivery_id, "succeeded", count, now, None, row)
        error = attempt.error or "failed"
        if outcome is Verdict.DISABLE:
            WEBHOOK_ATTEMPTS.labels("disabled").inc()
            await self._disable_endpoint(
                job.simulation_id, now, f"endpoint answered 410 Gone ({job.url})"
            )
            return Result(job.delivery_id, "disabled", count, now, error, row)
        since = self._failing_since.setdefault(job.simulation_id, now)
        if now - since >= self._settings.webhook_disable_after_s:
            WEBHOOK_ATTEMPTS.labels("disabled").inc()
            await self._disable_endpoint(
                job.simulation_id, now,
                f"endpoint failed continuously for {now - since:.0f} s ({job.url}): {error}",
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
        self._failing_since.pop(simulation_id, None)
        self._sims.forget(simulation_id)
        try:
            await self._disable(simulation_id, at, reason)
            await self._outbox.disable_pending(simulation_id, reason)
        except Exception:
            log.exception("disabling the webhook of simulation %d failed", simulation_id)

    # ---- recording -----------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._results_ready.wait()
            await asyncio.sleep(WRITE_INTERVAL_S)  # let a batch gather: one commit for many
            self._results_ready.clear()
            batch, self._results = self._results[:WRITE_BATCH], self._results[WRITE_BATCH:]
            if self._results:
                self._results_ready.set()
            try:
                await self._outbox.record(batch)
            except Exception:
                # Not recorded: the rows stay leased and are sent again when the lease
                # runs out (at least once), unless a later write succeeds first.
                log.exception("recording %d webhook attempts failed; will retry", len(batch))
                self._results = batch + self._results
                self._results_ready.set()
                await asyncio.sleep(POLL_INTERVAL_S)
                continue
            self._wake.set()

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
            except Exception:
                log.exception("webhook maintenance failed")

    async def close(self) -> None:
        """Stop claiming, stop the workers, then record what finished."""
        if self._unsubscribe is not None:
            self._unsubscribe()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        unfinished: list[Job] = []
        for endpoint in self._endpoints.values():
            unfinished.extend(await endpoint.close())
        done = {r.delivery_id for r in self._results}
        try:
            await self._outbox.record(self._results)
            # Hand back what was leased but not sent, so a restart need not wait out the lease.
            await self._outbox.release(
                [j.delivery_id for j in unfinished if j.delivery_id not in done]
            )
        except Exception:
            log.exception("recording webhook state at shutdown failed (leases will expire)")
        self._results = []


__all__ = ["Dispatcher", "Endpoint", "SimState", "SimStates"]
