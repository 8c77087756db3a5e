"""Event ingest and history: ``POST/GET /api/v2/simulation/{id}/events``."""

from __future__ import annotations

import time
from typing import Annotated, Any

import orjson
from fastapi import Query, Response, status

from ..errors import BadRequest
from ..events import ALL_TYPES, EVENT_ADAPTER
from ..metrics import INGEST_LATENCY
from .deps import CurrentUser, JsonBody, RuntimeDep
from .jsonlimits import INT64_MAX
from .params import Id
from .routing import SlashRouter

router = SlashRouter(tags=["events"])

_EVENT_SCHEMA_REF = {"$ref": "#/components/schemas/Event"}
_INGEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [_EVENT_SCHEMA_REF, {"type": "array", "items": _EVENT_SCHEMA_REF}]
                }
            }
        },
    }
}


@router.post(
    "/api/v2/simulation/{simulation_id}/events",
    status_code=status.HTTP_201_CREATED,
    openapi_extra=_INGEST_BODY,
)
async def post_events(
    simulation_id: Id, body: JsonBody, user: CurrentUser, runtime: RuntimeDep
) -> Response:
    """Append one event or an array of events, all or nothing.

    ``simulation_id`` comes from the path (a different one in an event is a 400),
    ``server_ts`` is filled when missing (except for gps_data), and each event gets an
    ``event_id``. They are then delivered to websocket streams and webhooks.
    """
    started = time.perf_counter()
    await runtime.simulations.visible_meta(user, simulation_id)  # 404 unless visible
    items = body if isinstance(body, list) else [body]
    if not items:
        raise BadRequest("the batch is empty; send one event or a non-empty array")
    stored = await runtime.ingest.submit(simulation_id, items)
    INGEST_LATENCY.observe(time.perf_counter() - started)
    body = {"event_ids": [str(event.event_id) for event in stored], "count": len(stored)}
    # Encoded here: FastAPI's generic encoder costs more than the rest of a small request.
    return Response(orjson.dumps(body), status_code=201, media_type="application/json")


def parse_cursor(value: str | None, name: str) -> int:
    """An event_id cursor from a query parameter (0 when absent)."""
    if value is None or value == "":
        return 0
    try:
        cursor = int(value)
    except ValueError:
        cursor = -1
    if not 0 <= cursor <= INT64_MAX:
        raise BadRequest(
            f"{name}={value!r} is not an event_id", code="invalid_cursor",
            details=[{"field": f"query.{name}", "value": value}],
        )
    return cursor


def parse_types(values: list[str] | None) -> list[str] | None:
    """message_type filters: repeated and/or comma-separated; unknown ones are a 400."""
    if not values:
        return None
    types = [t.strip() for value in values for t in value.split(",") if t.strip()]
    unknown = [t for t in types if t not in ALL_TYPES]
    if unknown:
        raise BadRequest(
            f"unknown message_type(s): {', '.join(unknown)}; valid values: "
            f"{', '.join(sorted(ALL_TYPES))}",
            code="unknown_message_type",
            details=[{"field": "query.message_type", "value": unknown}],
        )
    return types


@router.get("/api/v2/simulation/{simulation_id}/events")
async def get_events(
    simulation_id: Id,
    user: CurrentUser,
    runtime: RuntimeDep,
    after: Annotated[str | None, Query(description="Return events after this event_id.")] = None,
    message_type: Annotated[list[str] | None, Query(
        description="Only these types (repeat the parameter, or separate with commas).",
        json_schema_extra={"items": {"type": "string", "enum": sorted(ALL_TYPES)}},
    )] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """The simulation's events in order, after the cursor; page with ``meta.next_after``."""
    await runtime.simulations.visible_meta(user, simulation_id)
    cursor = parse_cursor(after, "after")
    events = await runtime.log.read(
        after=cursor, limit=limit, simulation_id=simulation_id,
        message_types=parse_types(message_type),
    )
    meta = {
        "after": str(cursor),
        "limit": limit,
        "count": len(events),
        "next_after": str(events[-1].event_id) if events else None,
    }
    # The frames are stored JSON already: splice them instead of parsing and re-encoding.
    body = b'{"objects":[%s],"meta":%s}' % (
        b",".join(event.frame for event in events),
        orjson.dumps(meta),
    )
    return Response(body, media_type="application/json")


def event_json_schema() -> dict[str, Any]:
    """JSON Schema of ``Event`` with its definitions, for the OpenAPI components."""
    return EVENT_ADAPTER.json_schema(ref_template="#/components/schemas/{model}")
