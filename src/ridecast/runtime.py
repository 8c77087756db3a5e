"""The running parts of one ridecast process, as named, typed fields.

``Runtime`` only holds the parts and the exit stack that stops them; ``app.open_runtime`` is
where they are built, wired, started, and their stops pushed on that stack. The HTTP routes
reach the parts through it (``api/deps.py``); no part below the HTTP surface imports it:
each gets its collaborators in its constructor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from .bus import Bus
from .config import Settings
from .errors import ServiceUnavailable
from .hub import Hub
from .ingest import Ingest
from .limits import Limits
from .limits.quota_service import Quotas
from .ports import SimulatorHost
from .simulations import SimulationCatalog, SimulationService
from .store.accounts import AccountStore
from .store.eventlog import EventLog
from .store.revocations import RevocationWatcher
from .webhooks.service import WebhookService

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Store, bus, event log, services and consumers of one process.

    ``hub`` and ``simulator`` are None in a process that serves no streams and runs no
    simulator (``ridecast worker``).
    """

    settings: Settings
    engine: AsyncEngine
    bus: Bus
    log: EventLog
    accounts: AccountStore
    simulations: SimulationService
    catalog: SimulationCatalog
    ingest: Ingest
    revocations: RevocationWatcher
    limits: Limits
    webhooks: WebhookService
    hub: Hub | None = None
    simulator: SimulatorHost | None = None
    # The organisations' quotas (None only where a test builds a runtime by hand).
    quotas: Quotas | None = None
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    started_at: float = field(default_factory=time.time)
    # The wall clock retention dates events by (a test passes its own instead of waiting).
    clock: Callable[[], float] = time.time

    def start_retention(self) -> None:
        """Start the periodic retention sweep (``RIDECAST_EVENT_RETENTION_S``)."""
        task = asyncio.create_task(self._retention_loop(), name="ridecast-retention")
        self.stack.push_async_callback(_cancel, task)

    async def apply_retention(self) -> int:
        """Remove the events older than ``RIDECAST_EVENT_RETENTION_S`` by ``clock``; how
        many were removed."""
        return await self.log.purge_older_than(self.clock() - self.settings.event_retention_s)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retention_interval_s)
            try:
                removed = await self.apply_retention()
                if removed:
                    log.info("retention removed %d events", removed)
            except ServiceUnavailable as exc:  # a store outage: its engine logs it
                log.debug("retention sweep failed: %s", exc)
            except Exception:
                log.exception("retention sweep failed")

    async def close(self) -> None:
        """Stop every part, in the reverse order of their start: the retention sweep and
        the consumers (hub, simulator, webhooks), then the log, the bus and the engine.

        Bounded by ``RIDECAST_SHUTDOWN_TIMEOUT_S``: a part that does not stop must not keep
        a rolling restart waiting for ever; what still runs then is named in the log.
        """
        try:
            async with asyncio.timeout(self.settings.shutdown_timeout_s):
                await self.stack.aclose()
        except TimeoutError:
            current = asyncio.current_task()
            running = sorted(task.get_name() for task in asyncio.all_tasks()
                             if task is not current and not task.done())
            log.error("stopping took longer than %g s (RIDECAST_SHUTDOWN_TIMEOUT_S); "
                      "exiting with %d task(s) still running: %s",
                      self.settings.shutdown_timeout_s, len(running),
                      ", ".join(running) or "none")


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
