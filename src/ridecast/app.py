"""``create_app(settings)``: the ASGI application, with every part wired in its lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from . import __version__
from .api import events as events_api
from .api import health, simulations, token
from .api import simulator as simulator_api
from .api import webhooks as webhooks_api
from .api.docs_pages import install_docs_pages
from .api.errors import BodyGuard, UnexpectedErrors, install_error_handlers
from .api.jsonlimits import JsonLimits
from .api.openapi import build_openapi
from .config import Settings, get_settings
from .dashboard import mount_dashboard
from .hub import start_hub, websocket_routes
from .runtime import Runtime
from .webhooks.service import start_webhooks

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The ridecast application for ``settings`` (default: from the environment)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = await Runtime.open(settings)
        simulator_api.install_simulator(runtime)
        app.state.runtime = runtime
        start_webhooks(runtime)
        await start_hub(runtime)
        try:
            yield
        finally:
            await runtime.close()

    app = FastAPI(
        title="ridecast",
        version=__version__,
        description="Real-time event delivery for ridesharing simulations and operations.",
        lifespan=lifespan,
        docs_url="/docs",
        openapi_url="/openapi.json",
    )
    app.state.settings = settings
    install_error_handlers(app)
    limits = JsonLimits(max_depth=settings.max_json_depth, max_string=settings.max_json_string,
                        max_items=settings.max_json_items)
    app.add_middleware(BodyGuard, max_bytes=settings.max_body_bytes, limits=limits)
    # Added last, so outermost of ours: it also catches what the body guard raises.
    app.add_middleware(UnexpectedErrors)
    # Routes are matched in order: the ingest hot path first.
    for router in (events_api.router, token.router, simulations.router, health.router,
                   simulator_api.router):
        app.include_router(router)
    app.include_router(webhooks_api.router)
    app.router.routes.extend(websocket_routes())
    # Explicit paths (GET / and /dashboard/...), so API and websocket routes stay reachable.
    mount_dashboard(app, settings)
    install_docs_pages(app)  # /docs and /docs/streams served offline (api/docs_pages.py)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, max_batch_events=settings.max_batch_events)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
