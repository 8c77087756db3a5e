"""``/healthz``, ``/metrics`` and ``/asyncapi.json``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.responses import JSONResponse

from .. import __version__
from ..events.schema import asyncapi_document
from ..metrics import REGISTRY
from .deps import RuntimeDep

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz(runtime: RuntimeDep) -> Response:
    """200 when the store answers; 503 otherwise."""
    try:
        async with runtime.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:
        return JSONResponse(
            {"status": "unavailable", "version": __version__, "store": repr(exc)}, 503
        )
    oldest, newest = await runtime.log.bounds()
    return JSONResponse(
        {"status": "ok", "version": __version__, "oldest_event_id": str(oldest),
         "last_event_id": str(newest)}
    )


@router.get("/readyz")
async def readyz(runtime: RuntimeDep) -> Response:
    """200 when this node can take traffic: its store and its bus answer; 503 otherwise.

    Point a load balancer's health check here (``/healthz`` says only that the process
    lives and its store answers).
    """
    checks: dict[str, str] = {}
    try:
        async with runtime.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        checks["store"] = "ok"
    except Exception as exc:
        checks["store"] = f"unavailable: {type(exc).__name__}"
    ping = getattr(runtime.bus, "ping", None)
    if ping is not None:
        try:
            await ping()
            checks["bus"] = "ok"
        except Exception as exc:
            checks["bus"] = f"unavailable: {type(exc).__name__}"
    ready = all(value == "ok" for value in checks.values())
    return JSONResponse({"status": "ready" if ready else "unavailable", **checks},
                        200 if ready else 503, headers=None if ready else {"Retry-After": "1"})


@router.get("/metrics")
async def metrics() -> Response:
    """Prometheus text format."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


@router.get("/asyncapi.json")
async def asyncapi() -> dict[str, Any]:
    """AsyncAPI 2.6 document of the websocket channels and webhook messages."""
    return asyncapi_document()
