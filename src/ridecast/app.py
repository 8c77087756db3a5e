"""Where every part is built and wired: ``open_runtime`` and ``create_app``.

``open_runtime(settings)`` chooses the implementations (``memory://`` or ``redis://`` bus,
SQLite or PostgreSQL store), gives each part its collaborators and starts them in order:
store and migrations, bus, event log, caches, webhooks, simulator host, websocket hub.
``create_app(settings)`` is the ASGI application whose lifespan opens and closes it.
``ridecast worker`` opens the same runtime with only the webhook dispatcher.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import Receive, Scope, Send

from . import __version__
from .api import events as events_api
from .api import health, simulations, templates, token
from .api import simulator as simulator_api
from .api import webhooks as webhooks_api
from .api.crosssite import STATE_CHANGING, normalise_origin, refusal
from .api.docs_pages import install_docs_pages
from .api.errors import BodyGuard, UnexpectedErrors, install_error_handlers, ridecast_error_response
from .api.jsonlimits import JsonLimits
from .api.openapi import build_openapi
from .bus import Bus, MemoryBus, create_bus
from .config import Settings, get_settings
from .dashboard import mount_dashboard
from .hub import Hub, open_dedicated_listener, websocket_routes
from .ingest import Ingest
from .limits import create_limits
from .limits.quota_counts import create_quota_counts
from .limits.quota_service import Quotas
from .ports import SimulatorHost
from .runtime import Runtime
from .simulations import SimulationCatalog, SimulationService
from .simulator.core.settings import read_settings
from .simulator.hosting.cluster_host import ClusterHost
from .simulator.hosting.engine_pool import EnginePool, default_size
from .simulator.hosting.journal import JournalStore
from .simulator.hosting.lease import LeaseStore
from .simulator.hosting.manager import SimThrottle, SimulatorManager
from .simulator.hosting.resume import LogTail
from .simulator.hosting.snapshots import SnapshotPolicy
from .store.accounts import AccountStore
from .store.driver_connections import close_engine
from .store.engine import create_engine, upgrade
from .store.eventlog import EventLog
from .store.newest_id import newest_id_reader
from .store.outbox import OutboxSql, outbox_sql
from .store.quota_usage import QuotaUsageStore
from .store.revocations import RevocationWatcher
from .store.run_fence import RunFence
from .store.simulations import SimulationStore
from .store.snapshots import SnapshotStore
from .webhooks.bodies import Bodies
from .webhooks.claimer import Claimer
from .webhooks.deliverylog import DeliveryLog
from .webhooks.dispatcher import Dispatcher
from .webhooks.health import EndpointHealth
from .webhooks.policy import DeliveryPolicy
from .webhooks.recorder import Recorder
from .webhooks.resolver import Resolver
from .webhooks.sender import Sender
from .webhooks.service import WebhookService
from .webhooks.watch import OutboxWatch

log = logging.getLogger(__name__)


async def open_runtime(
    settings: Settings, *, serve_streams: bool = True, run_simulator: bool = True,
    run_dispatcher: bool | None = None, watch_outbox: bool = False,
    host_runs: bool | None = None,
) -> Runtime:
    """Migrate the store, then build, wire and start every part of one process.

    ``serve_streams``: build the websocket hub (and its dedicated listener when
    ``RIDECAST_WS_PORT`` is set). ``run_simulator``: answer simulator commands;
    ``host_runs``: run them in this process (default ``RIDECAST_SIMULATOR_HOST``), else
    hand them to the ``ridecast simulator`` processes of the cluster.
    ``run_dispatcher``: deliver webhooks here (default ``RIDECAST_WEBHOOK_WORKERS``).
    ``watch_outbox``: this process appends no events, so its dispatcher watches the outbox
    for other processes' rows when the bus does not bring them (the in-process bus).

    Each part's stop is pushed on an exit stack before it starts, so a start that fails
    at any step (the websocket port taken, Redis refusing) stops, in reverse order,
    everything started before it, then raises; ``Runtime.close`` unwinds the same stack.
    """
    stack = AsyncExitStack()
    try:
        return await _start(stack, settings, serve_streams=serve_streams,
                            run_simulator=run_simulator, run_dispatcher=run_dispatcher,
                            watch_outbox=watch_outbox,
                            host_runs=settings.simulator_host if host_runs is None
                            else host_runs)
    except BaseException:
        await stack.aclose()
        raise


async def _start(
    stack: AsyncExitStack, settings: Settings, *, serve_streams: bool, run_simulator: bool,
    run_dispatcher: bool | None, watch_outbox: bool, host_runs: bool,
) -> Runtime:
    await upgrade(settings.database_url)
    engine = create_engine(settings.database_url,
                           outage_log_interval_s=settings.outage_log_interval_s,
                           pool_size=settings.database_pool_size,
                           pool_overflow=settings.database_pool_overflow,
                           pool_timeout_s=settings.database_pool_timeout_s,
                           sqlite_synchronous=settings.sqlite_synchronous)
    stack.push_async_callback(close_engine, engine)
    bus = create_bus(settings.bus_url, prefix=settings.bus_prefix,
                     maxlen=settings.bus_stream_maxlen,
                     catch_up_interval_s=settings.bus_catch_up_interval_s,
                     timeout_s=settings.bus_timeout_s,
                     error_log_interval_s=settings.outage_log_interval_s)
    # The store's one owner of the outbox's statements, for the event log and the webhooks.
    outbox = outbox_sql(engine.dialect.name,
                        hold_s=DeliveryPolicy.from_settings(settings).claim_hold_s)
    event_log = EventLog(engine, bus, max_batch=settings.group_commit_max_events,
                         max_pending=settings.ingest_max_pending_events, outbox=outbox)
    bus.attach_log(event_log)
    stack.push_async_callback(bus.close)
    await bus.start()
    stack.push_async_callback(event_log.close)
    await event_log.start()
    sim_store = SimulationStore(engine)
    catalog = SimulationCatalog(sim_store, bus, max_size=settings.simulation_cache_size,
                                ttl_s=settings.simulation_cache_ttl_s)
    stack.callback(catalog.close)
    stack.push_async_callback(catalog.cancel_reads)
    simulations_service = SimulationService(sim_store, bus, catalog)
    accounts = AccountStore(engine)
    stack.push_async_callback(accounts.cancel_checks)
    revocations = RevocationWatcher(accounts, interval_s=settings.revocation_poll_s)
    stack.push_async_callback(revocations.close)
    await revocations.start()
    ingest = Ingest(catalog, event_log, max_batch=settings.max_batch_events)
    # On Redis when the bus is (the cluster's counts), else in this process.
    limits = create_limits(settings)
    stack.push_async_callback(limits.close)
    await limits.start()
    quotas = _quotas(settings, engine, catalog)
    stack.push_async_callback(quotas.close)
    await quotas.start()
    event_log.gate = quotas
    simulations_service.creation_gate = quotas.creating

    dispatch = settings.webhook_workers if run_dispatcher is None else run_dispatcher
    webhooks = _webhooks(settings, engine, outbox, bus, catalog, simulations_service,
                         run_dispatcher=dispatch,
                         watch_outbox=watch_outbox and isinstance(bus, MemoryBus))
    simulations_service.add_data_check(webhooks.check_data)
    stack.push_async_callback(_logging_failure, "webhooks", webhooks.close)
    webhooks.start()

    simulator: SimulatorHost | None = None
    if run_simulator:
        simulator = _simulator_host(settings, engine, bus, ingest, event_log,
                                    throttle=quotas.throttle, host_runs=host_runs)
        stack.push_async_callback(_logging_failure, "simulator", simulator.close)
        simulations_service.add_data_check(_check_simulator_settings)

    hub: Hub | None = None
    if serve_streams:
        hub = Hub(settings, bus=bus, tokens=accounts, directory=catalog, events=event_log,
                  revocations=revocations, limits=limits)
        stack.push_async_callback(_logging_failure, "hub", hub.close)
        await open_dedicated_listener(hub, settings)

    runtime = Runtime(
        settings=settings,
        engine=engine,
        bus=bus,
        log=event_log,
        accounts=accounts,
        simulations=simulations_service,
        catalog=catalog,
        ingest=ingest,
        revocations=revocations,
        limits=limits,
        quotas=quotas,
        webhooks=webhooks,
        hub=hub,
        simulator=simulator,
        stack=stack,
    )
    runtime.start_retention()
    return runtime


async def _logging_failure(name: str, stop: Callable[[], Awaitable[None]]) -> None:
    """``stop()``; a failure is logged, so that the parts stopped after it still stop."""
    try:
        await stop()
    except Exception:
        log.exception("closing %s failed", name)


def _webhooks(settings: Settings, engine: AsyncEngine, sql: OutboxSql, bus: Bus,
              catalog: SimulationCatalog,
              simulations_service: SimulationService, *, run_dispatcher: bool,
              watch_outbox: bool) -> WebhookService:
    """The webhook parts: on the store's one owner of the outbox's statements (``sql``), the
    claim, the record and the delivery log on it, the sender, and (when this process
    delivers) the dispatcher, which reads simulations through the catalog."""
    policy = DeliveryPolicy.from_settings(settings)
    resolver = Resolver(allow_private=settings.webhook_allow_private)
    sender = Sender(timeout_s=settings.webhook_timeout_s,
                    connect_timeout_s=settings.webhook_connect_timeout_s,
                    allow_private=settings.webhook_allow_private, resolver=resolver)
    deliveries = DeliveryLog(engine, sql)
    dispatcher: Dispatcher | None = None
    if run_dispatcher:
        recorder = Recorder(engine, sql)
        watch_s = settings.webhook_watch_interval_s
        dispatcher = Dispatcher(
            policy, claimer=Claimer(engine, sql, recorder), recorder=recorder,
            deliveries=deliveries, sender=sender, simulations=catalog,
            health=EndpointHealth(engine, quiet_gap_s=policy.quiet_gap_s,
                                  hold_s=policy.claim_hold_s),
            bodies=Bodies(policy.body_cache_bytes), bus=bus,
            disable=simulations_service.disable_webhook,
            watch=(OutboxWatch(newest_id_reader(engine), interval_s=watch_s)
                   if watch_outbox and watch_s > 0 else None),
        )
    return WebhookService(resolver=resolver, sender=sender, deliveries=deliveries,
                          dispatcher=dispatcher, max_page_bytes=settings.max_page_bytes)


def _quotas(settings: Settings, engine: AsyncEngine, catalog: SimulationCatalog) -> Quotas:
    """The organisations' quotas: counted in the store, shared through Redis when the bus
    is Redis (``limits/quota_service.py``)."""

    async def org_of(simulation_id: int) -> int | None:
        meta = await catalog.get(simulation_id)
        return None if meta is None else meta.org_id

    return Quotas(settings, create_quota_counts(settings), QuotaUsageStore(engine), org_of)


def _simulator_host(settings: Settings, engine: AsyncEngine, bus: Bus,
                    ingest: Ingest, event_log: EventLog, *,
                    throttle: SimThrottle | None = None,
                    host_runs: bool = True) -> SimulatorHost:
    """Simulator runs publish through ingest; runs are leased in the store, commands are
    forwarded to the owner on the bus, operations journaled, and a run whose node stopped
    is taken over from its newest snapshot and its journal
    (``simulator/hosting/cluster_host.py``). Without ``host_runs`` this process runs none:
    starts go to the hosting processes of the cluster, over the bus."""
    if not host_runs and isinstance(bus, MemoryBus):
        raise ValueError("RIDECAST_SIMULATOR_HOST=false leaves simulator runs to `ridecast "
                         "simulator` processes, which only a shared bus reaches: set "
                         "RIDECAST_BUS_URL=redis://...")
    node_id = uuid.uuid4().hex
    journal = JournalStore(engine, owner=node_id)
    processes = settings.simulator_engine_processes
    pool = None if processes == 0 or not host_runs else EnginePool(
        default_size() if processes is None else processes,
        slice_s=settings.simulator_slice_ms / 1000.0,
        recycle_bytes=int(settings.simulator_engine_recycle_mb * (1 << 20)),
        idle_s=settings.simulator_engine_idle_s, nice=settings.simulator_engine_nice)

    async def publish(simulation_id: int, events: list[dict[str, Any]]) -> object:
        # A run's events are written only while this node holds its lease (as its journal
        # is): a node that stalled past it publishes nothing the new owner also does.
        return await ingest.submit_trusted(simulation_id, events,
                                           fence=RunFence(simulation_id, node_id))

    manager = SimulatorManager(publish, max_batch=ingest.max_batch,
                               max_finished=settings.simulator_max_finished_runs,
                               journal=journal, throttle=throttle,
                               tail=LogTail(event_log), pool=pool,
                               publish_share=settings.simulator_publish_share,
                               snapshots=SnapshotStore(engine,
                                                       keep=settings.simulator_snapshot_keep),
                               snapshot_policy=SnapshotPolicy(
                                   every_s=settings.simulator_snapshot_every_s,
                                   every_events=settings.simulator_snapshot_every_events,
                                   max_bytes=settings.simulator_snapshot_max_bytes))
    host = ClusterHost(manager, LeaseStore(engine), bus, lease_s=settings.simulator_lease_s,
                       forward_timeout_s=settings.simulator_forward_timeout_s,
                       journal=journal, tail=LogTail(event_log), hosts_runs=host_runs,
                       node_id=node_id)
    host.start_renewing()
    return host


async def _check_simulator_settings(data: dict[str, Any]) -> None:
    """Refuse bad ``data.simulator`` when it is set, not when the run starts."""
    if "simulator" in data:
        read_settings(data)


class RidecastApp(FastAPI):
    """FastAPI with the ingest hot path served ahead of its middleware stack
    (``api.events.IngestFastPath``); every other request goes through the stack."""

    fast_ingest: events_api.IngestFastPath | None = None
    allowed_origins: frozenset[str] = frozenset()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in STATE_CHANGING:
            # Before anything reads the body or the credentials: a cross-site write is
            # refused whoever's credentials the browser attached (api/crosssite.py).
            refused = refusal(scope["method"], scope.get("scheme", "http"), scope["headers"],
                              self.allowed_origins)
            if refused is not None:
                await ridecast_error_response(refused, scope["path"], scope["method"])(
                    scope, receive, send)
                return
        fast = self.fast_ingest
        if fast is not None:
            simulation_id = fast.simulation_id(scope)
            if simulation_id is not None:
                await fast(scope, receive, send, simulation_id,
                           getattr(self.state, "runtime", None), super().__call__)
                return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings | None = None, *,
               ingest_fast_path: bool = True) -> RidecastApp:
    """The ridecast application for ``settings`` (default: from the environment).

    ``ingest_fast_path=False`` serves ingest through the middleware stack and the route
    too (the tests compare both).
    """
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            runtime = await open_runtime(settings)
        except Exception as exc:
            # One line that says why; uvicorn's copy of the traceback is shown only at
            # debug level (cli/startlog.py).
            log.error("ridecast could not start: %s (%s); everything it had started is "
                      "stopped%s", exc, type(exc).__name__,
                      "" if settings.log_level == "debug"
                      else " (RIDECAST_LOG_LEVEL=debug shows the traceback)")
            raise
        app.state.runtime = runtime
        app.state.hub = runtime.hub
        try:
            yield
        finally:
            await runtime.close()

    app = RidecastApp(
        title="ridecast",
        version=__version__,
        description="Real-time event delivery for ridesharing simulations and operations.",
        lifespan=lifespan,
        docs_url="/docs",
        openapi_url="/openapi.json",
    )
    app.state.settings = settings
    app.allowed_origins = frozenset(normalise_origin(o) for o in settings.allowed_origins)
    install_error_handlers(app)
    limits = JsonLimits(max_depth=settings.max_json_depth, max_string=settings.max_json_string,
                        max_items=settings.max_json_items)
    app.add_middleware(BodyGuard, max_bytes=settings.max_body_bytes, limits=limits)
    if ingest_fast_path:
        app.fast_ingest = events_api.IngestFastPath(settings.max_body_bytes, limits)
    # Added last, so outermost of ours: it also catches what the body guard raises.
    app.add_middleware(UnexpectedErrors)
    # Routes are matched in order: the ingest hot path first.
    for router in (events_api.router, token.router, simulations.router, templates.router,
                   health.router,
                   simulator_api.router):
        app.include_router(router)
    app.include_router(webhooks_api.router)
    app.router.routes.extend(websocket_routes(lambda: getattr(app.state, "hub", None)))
    # Explicit paths (GET / and /dashboard/...), so API and websocket routes stay reachable.
    mount_dashboard(app, settings)
    install_docs_pages(app)  # /docs and /docs/streams served offline (api/docs_pages.py)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, max_batch_events=settings.max_batch_events)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
