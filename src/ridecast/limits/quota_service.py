"""The quotas of each organisation, enforced for the whole cluster.

``Quotas`` joins the rules (``quotas.py``), the store's counts (``store/quota_usage.py``)
and the shared counts (``quota_counts.py``: this process's, or Redis's when the bus is
Redis):

* **runs and vehicles**: ``run_slot`` holds the organisation's lock, counts its runs in the
  store (running or paused and owned, or waiting to be taken over) and refuses, or lets the
  start go on under the lock, so that the run's row says running before another start of
  the organisation is counted. Nothing of a refused run is started: no lease, no journal,
  no event.
* **simulations and templates**: ``creating``, the same way with the store's rows.
* **simulator events per second**: ``throttle``, called by each run before it publishes a
  batch; a run over its organisation's rate waits for tokens (its simulated time slows),
  it never drops an event.
* **stored event bytes**: ``admit``, called by the event log for every batch before it is
  queued (ingest, REST operations, simulator); it answers from this node's ``ByteLedger``
  without waiting. Every ``EXCHANGE_S`` the node adds what it appended to the shared totals
  and reads them back, so an organisation appending through several nodes may overshoot
  by what the other nodes appended within that time. Every ``RIDECAST_QUOTA_RECOUNT_S``
  (and at start-up) the totals are recounted from the store, which gives back what
  retention removed and what was counted but never written.

Usage is published as ``ridecast_quota_usage{organisation, quota}`` every ``USAGE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ..config import Settings
from ..errors import QuotaExceeded, ServiceUnavailable
from ..metrics import QUOTA_LIMIT, QUOTA_REFUSED, QUOTA_THROTTLED_SECONDS, QUOTA_USAGE
from ..store.eventlog import NewEvent
from ..store.quota_usage import QuotaUsageStore
from .quota_counts import QuotaCounts
from .quotas import (
    ByteLedger,
    QuotaPolicy,
    RunUsage,
    bounded_labels,
    bytes_refusal,
    count_refusal,
    start_refusal,
    vehicles_refusal,
)

log = logging.getLogger(__name__)

EXCHANGE_S = 1.0
"""How often a node adds its appended bytes to the shared totals and reads them back."""
COUNT_WAIT_S = 10.0
"""Longest an append waits for the start-up count of the stored bytes (then 503)."""
USAGE_S = 5.0
"""How often a node reads every organisation's usage for ``/metrics``."""

OrgOf = Callable[[int], Awaitable[int | None]]
"""The organisation of a simulation (None: it does not exist)."""


class Quotas:
    """The quotas of every organisation (see the module docstring)."""

    def __init__(self, settings: Settings, counts: QuotaCounts, usage: QuotaUsageStore,
                 org_of: OrgOf) -> None:
        self.policy = QuotaPolicy.from_settings(settings)
        self.counts = counts
        self._usage = usage
        self._org_of = org_of
        self._ledger = ByteLedger()
        self._recount_s = settings.quota_recount_s
        self._most = settings.quota_metrics_orgs
        # Simulator events this node published per organisation since the last usage read.
        self._published: Counter[int] = Counter()
        self._published_since = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        # Set once the stored bytes have been counted from the store since this start.
        self._counted = asyncio.Event()
        for kind, limit in (("runs", self.policy.runs), ("vehicles", self.policy.vehicles),
                            ("vehicles_per_run", self.policy.vehicles_per_run),
                            ("events_per_s", self.policy.events_per_s),
                            ("simulations", self.policy.simulations),
                            ("templates", self.policy.templates),
                            ("event_bytes", self.policy.event_bytes)):
            QUOTA_LIMIT.labels(kind).set(limit)

    # ---- runs and vehicles ---------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def run_slot(self, org_id: int, simulation_id: int,
                       vehicles: int) -> AsyncIterator[None]:
        """Refuse a start of ``vehicles`` on ``simulation_id`` that breaks a quota of
        ``org_id``; else hold the organisation's lock while the caller starts the run."""
        _refuse(vehicles_refusal(self.policy, vehicles))
        async with self.counts.lock(f"runs:{org_id}"):
            runs, held = await self._usage.runs_of(org_id, besides=simulation_id)
            _refuse(start_refusal(self.policy, RunUsage(runs, held), vehicles))
            yield

    # ---- simulations and templates -------------------------------------------------------

    @contextlib.asynccontextmanager
    async def creating(self, kind: str, org_id: int) -> AsyncIterator[None]:
        """Refuse one more of ``kind`` (simulations, templates) beyond the quota of
        ``org_id``; else hold the organisation's lock while the caller creates it."""
        limit = self.policy.simulations if kind == "simulations" else self.policy.templates
        async with self.counts.lock(f"{kind}:{org_id}"):
            _refuse(count_refusal(kind, limit, await self._usage.count_of(kind, org_id)))
            yield

    # ---- simulator events per second -----------------------------------------------------

    async def throttle(self, simulation_id: int, count: int) -> None:
        """Wait until the organisation of ``simulation_id`` may publish ``count`` more
        simulator events."""
        org_id = await self._org_of(simulation_id)
        if org_id is None:
            return
        left = count
        while left > 0:
            granted, wait = await self.counts.take_events(org_id, left)
            left -= granted
            if left > 0 and granted == 0:
                QUOTA_THROTTLED_SECONDS.inc(wait)
                await asyncio.sleep(wait)
        self._published[org_id] += count

    # ---- stored event bytes --------------------------------------------------------------

    def within(self, batch: Sequence[NewEvent]) -> bool:
        """Whether ``batch`` fits its organisation's stored bytes, as far as this node can
        tell without waiting (the ingest fast path): False for an organisation whose total
        it has not read yet, so that the full path reads it first (``learn``)."""
        if not batch:
            return True
        org_id = batch[0].org_id
        if org_id not in self._ledger.totals:
            return False
        size = sum(len(event.body) for event in batch)
        return self._ledger.held(org_id) + size <= self.policy.event_bytes

    async def learn(self, batch: Sequence[NewEvent]) -> None:
        """Read the shared total of ``batch``'s organisation when this node has none yet
        (its first append here, on a node that started before the organisation's first
        event), so that ``admit`` does not start it from zero."""
        if not batch or batch[0].org_id in self._ledger.totals:
            return
        org_id = batch[0].org_id
        if not self.counts.shared:
            # In one process the totals are this process's: until the start-up recount is
            # done, they are not known (a restart must not start them from zero).
            try:
                async with asyncio.timeout(COUNT_WAIT_S):
                    await self._counted.wait()
            except TimeoutError:
                raise ServiceUnavailable("the stored events are being counted after a "
                                         "start; retry shortly", retry_after=1) from None
        else:
            with contextlib.suppress(Exception):  # unreachable counts: this node's own
                self._ledger.update(await self.counts.exchange_bytes({}, (org_id,)))
        self._ledger.totals.setdefault(org_id, 0)

    def admit(self, batch: Sequence[NewEvent]) -> None:
        """Count ``batch`` (one simulation's events, so one organisation's) against its
        organisation's stored bytes, or raise 403 ``quota_event_bytes``."""
        if not batch:
            return
        org_id = batch[0].org_id
        size = sum(len(event.body) for event in batch)
        _refuse(bytes_refusal(self.policy.event_bytes, self._ledger.held(org_id), size))
        self._ledger.add(org_id, size)

    async def _exchange(self) -> None:
        """Add what this node appended to the shared totals; read every total it knows
        (what the other nodes appended)."""
        pending = self._ledger.take_pending()
        if not pending and not self._ledger.totals:
            return
        try:
            totals = await self.counts.exchange_bytes(pending, self._ledger.totals.keys())
        except BaseException:
            self._ledger.give_back(pending)
            raise
        # What this node appended meanwhile stays pending: it is not in these totals.
        self._ledger.update(totals)

    async def recount(self) -> None:
        """The stored bytes of every organisation, from the store, as the new totals."""
        if not await self.counts.claim("recount", 0.9 * self._recount_s):
            return  # another node of the cluster recounted lately
        await self._exchange()
        found = await self._usage.event_bytes_by_org()
        totals = {org_id: 0 for org_id in self._ledger.totals} | found
        await self.counts.replace_bytes(totals)
        self._ledger.replace(totals)

    # ---- usage for /metrics --------------------------------------------------------------

    async def publish_usage(self) -> None:
        """Set ``ridecast_quota_usage`` from the store and this node's counts."""
        runs, vehicles = await self._usage.runs_by_org()
        simulations = await self._usage.counts_by_org("simulations")
        templates = await self._usage.counts_by_org("templates")
        ledger = self._ledger
        stored = {org: ledger.held(org) for org in ledger.totals.keys() | ledger.pending}
        now = time.monotonic()
        elapsed = max(1e-3, now - self._published_since)
        rates = {org: count / elapsed for org, count in self._published.items()}
        self._published.clear()
        self._published_since = now
        QUOTA_USAGE.clear()
        for kind, usage in (("runs", runs), ("vehicles", vehicles),
                            ("simulations", simulations), ("templates", templates),
                            ("event_bytes", stored), ("events_per_s", rates)):
            for label, value in bounded_labels(usage, self._most).items():
                QUOTA_USAGE.labels(label, kind).set(value)

    # ---- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Keep the counts: recount the stored bytes first (a restart loses nothing), in
        the background, so that a large store does not hold the start-up (an append of
        an organisation not yet counted waits for it: ``learn``)."""
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="quotas")

    async def _step(self, step: Callable[[], Awaitable[None]], what: str) -> None:
        try:
            await step()
        except ServiceUnavailable as exc:  # a store outage: its engine logs it
            log.debug("quotas: %s failed: %s", what, exc)
        except Exception:
            log.exception("quotas: %s failed", what)

    async def _loop(self) -> None:
        while not self._counted.is_set():
            try:
                await self.recount()
            except Exception as exc:  # the store is not there yet: try again shortly
                log.debug("quotas: recounting stored event bytes failed: %s", exc)
                await asyncio.sleep(EXCHANGE_S)
            else:
                self._counted.set()
        recount_at = time.monotonic() + self._recount_s
        usage_at = 0.0
        while True:
            await asyncio.sleep(EXCHANGE_S)
            await self._step(self._exchange, "adding appended bytes to the shared totals")
            now = time.monotonic()
            if now >= recount_at:
                recount_at = now + self._recount_s
                await self._step(self.recount, "recounting stored event bytes")
            if now >= usage_at:
                usage_at = now + USAGE_S
                await self._step(self.publish_usage, "reading the usage for /metrics")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self._exchange()
        await self.counts.close()


def _refuse(refused: QuotaExceeded | None) -> None:
    if refused is not None:
        QUOTA_REFUSED.labels(refused.code).inc()
        raise refused
