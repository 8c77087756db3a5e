"""``/healthz``, ``/metrics`` and ``/asyncapi.json``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.responses import JSONResponse

from .. import __version__
from ..errors import ServiceUnavailable
from ..events.asyncapi import asyncapi_document
from ..events.schema import event_schemas
from ..metrics import REGISTRY
from ..runtime import Runtime
from .deps import RuntimeDep
from .responses import AsyncApiDocument, EventSchemaDocument, Health, Readiness, answers
from .routing import handler_name

router = APIRouter(tags=["operations"], generate_unique_id_function=handler_name)


@router.get("/healthz", **answers(Health))
async def healthz(runtime: RuntimeDep) -> Response:
    """200 when the store answers within ``RIDECAST_READY_TIMEOUT_S``; 503 otherwise.

    The 503 names the kind of failure (``"store": "unavailable: OperationalError"``), never
    the driver's message: this route is public, and a driver's text can carry host names,
    database names and SQL.
    """
    store = await _check(_store_answers(runtime), runtime.settings.ready_timeout_s)
    if store != "ok":
        return JSONResponse({"status": "unavailable", "version": __version__, "store": store},
                            503, headers={"Retry-After": "1"})
    oldest, newest = await runtime.log.bounds()
    return JSONResponse(
        {"status": "ok", "version": __version__, "oldest_event_id": str(oldest),
         "last_event_id": str(newest)}
    )


@router.get("/readyz", **answers(Readiness))
async def readyz(runtime: RuntimeDep) -> Response:
    """200 when this node can take traffic: its store and its bus answer; 503 otherwise.

    Point a load balancer's health check here (``/healthz`` says only that the process
    lives and its store answers). Both checks run side by side, each given at most
    ``RIDECAST_READY_TIMEOUT_S``: a part that hangs reads as ``unavailable: timeout``.
    """
    timeout = runtime.settings.ready_timeout_s
    names = ["store"]
    checks = [_check(_store_answers(runtime), timeout)]
    ping = getattr(runtime.bus, "ping", None)
    if ping is not None:
        names.append("bus")
        checks.append(_check(ping(), timeout))
    results = dict(zip(names, await asyncio.gather(*checks), strict=True))
    ready = all(value == "ok" for value in results.values())
    # Said, not failed on: a node whose limits fell back to its own counts still serves
    # (its limits apply per node until Redis answers).
    return JSONResponse({"status": "ready" if ready else "unavailable", **results,
                         "limits": runtime.limits.mode},
                        200 if ready else 503, headers=None if ready else {"Retry-After": "1"})


async def _store_answers(runtime: Runtime) -> None:
    async with runtime.engine.connect() as conn:
        await conn.execute(text("SELECT 1"))


async def _check(probe: Awaitable[Any], timeout_s: float) -> str:
    """``"ok"`` when ``probe`` completes within ``timeout_s``, else what went wrong."""
    try:
        async with asyncio.timeout(timeout_s):
            await probe
    except TimeoutError:
        return f"unavailable: timeout after {timeout_s:g} s"
    except Exception as exc:
        cause = exc.__cause__ if isinstance(exc, ServiceUnavailable) and exc.__cause__ else exc
        return f"unavailable: {type(cause).__name__}"
    return "ok"


@router.get("/metrics")
async def metrics() -> Response:
    """Prometheus text format."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


@router.get("/asyncapi.json", **answers(AsyncApiDocument))
async def asyncapi() -> dict[str, Any]:
    """AsyncAPI 3.0 document of the websocket streams and the webhook."""
    return asyncapi_document()


@router.get("/schema.json", **answers(EventSchemaDocument))
async def event_schema() -> dict[str, Any]:
    """JSON Schema of every event, as ``ridecast schema`` prints it: ``$defs`` and a
    ``oneOf`` of the 18 types."""
    return event_schemas()
