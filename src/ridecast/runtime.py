"""The running parts of one ridecast process, built and torn down by ``app.create_app``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from .auth.throttle import FailureThrottle, LoginThrottle, RateLimiter
from .bus import Bus, create_bus
from .config import Settings
from .ingest import Ingest
from .simulations import SimulationCatalog, SimulationService
from .store.accounts import AccountStore
from .store.engine import create_engine, upgrade
from .store.eventlog import EventLog
from .store.revocations import RevocationWatcher
from .store.simulations import SimulationStore

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Store, bus, event log and services of one process; consumers hang off it."""

    settings: Settings
    engine: AsyncEngine
    bus: Bus
    log: EventLog
    accounts: AccountStore
    simulations: SimulationService
    catalog: SimulationCatalog
    ingest: Ingest
    revocations: RevocationWatcher
    login_throttle: LoginThrottle
    key_rate: RateLimiter
    # Parts that plug in (websocket hub, webhook dispatcher, simulator manager) register
    # their start/stop here so that start-up and shutdown order stays in one place.
    components: dict[str, Any] = field(default_factory=dict)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    @classmethod
    async def open(cls, settings: Settings) -> Runtime:
        """Migrate the database and start the event log and the bus."""
        await upgrade(settings.database_url)
        engine = create_engine(settings.database_url)
        bus = create_bus(settings.bus_url, prefix=settings.bus_prefix,
                         maxlen=settings.bus_stream_maxlen,
                         catch_up_interval_s=settings.bus_catch_up_interval_s)
        event_log = EventLog(engine, bus, max_batch=settings.group_commit_max_events,
                             max_pending=settings.ingest_max_pending_events)
        bus.attach_log(event_log)
        await bus.start()
        await event_log.start()
        sim_store = SimulationStore(engine)
        catalog = SimulationCatalog(sim_store, bus, max_size=settings.simulation_cache_size,
                                    ttl_s=settings.simulation_cache_ttl_s)
        accounts = AccountStore(engine)
        revocations = RevocationWatcher(accounts, interval_s=settings.revocation_poll_s)
        await revocations.start()
        runtime = cls(
            settings=settings,
            engine=engine,
            bus=bus,
            log=event_log,
            accounts=accounts,
            simulations=SimulationService(sim_store, bus, catalog),
            catalog=catalog,
            ingest=Ingest(catalog, event_log, max_batch=settings.max_batch_events),
            revocations=revocations,
            login_throttle=LoginThrottle(
                FailureThrottle(settings.auth_failures_per_user, settings.auth_failure_window_s),
                FailureThrottle(settings.auth_failures_per_address,
                                settings.auth_failure_window_s),
            ),
            key_rate=RateLimiter(settings.rate_limit_per_key, settings.rate_limit_burst),
        )
        runtime._tasks.append(asyncio.create_task(runtime._retention_loop()))
        return runtime

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retention_interval_s)
            try:
                removed = await self.log.purge_older_than(
                    time.time() - self.settings.event_retention_s
                )
                if removed:
                    log.info("retention removed %d events", removed)
            except Exception:
                log.exception("retention sweep failed")

    async def close(self) -> None:
        """Stop in reverse order of dependency: consumers, then the log, then the bus."""
        await self.revocations.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for name, component in reversed(list(self.components.items())):
            stop = getattr(component, "close", None)
            if stop is not None:
                try:
                    await stop()
                except Exception:
                    log.exception("closing %s failed", name)
        await self.log.close()
        self.catalog.close()
        await self.bus.close()
        await self.engine.dispose()
