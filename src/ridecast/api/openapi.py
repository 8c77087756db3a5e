"""The OpenAPI document, generated from the routes and made to tell the whole truth.

FastAPI documents each operation's success and a 422 that ridecast never sends (its
validation errors are 400s). ``build_openapi`` adds what the server really answers: the
error responses every operation can give, each with the one error schema and the codes of
the error table behind that status (a 403 names only the codes its operation can give; every
state-changing operation lists the cross-site refusals of ``api/crosssite.py``, 403 and 415);
both authentication schemes; the limits of the ingest body; and the plain-text content type
of ``/metrics``. A test walks every operation with hostile input (schemathesis) and fails on
any status or body this document does not allow.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ..errors import ERRORS
from ..events.schema import without_null_defaults
from .crosssite import STATE_CHANGING
from .events import event_json_schema

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string", "description": "A code of docs/errors.md."},
                "message": {"type": "string"},
                "details": {"type": "array", "items": {}},
            },
        }
    },
}

SECURITY_SCHEMES = {
    "basicAuth": {
        "type": "http",
        "scheme": "basic",
        "description": "HTTP Basic with the user name and one of its API keys (what clients "
        "of the original service send).",
    },
    "tokenAuth": {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": "`Authorization: Token <api_key>`.",
    },
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "description": "`Authorization: Bearer <token>` with a token of GET /api/v2/user/token/ "
        "(what the dashboard holds instead of the key); it cannot issue another token.",
    },
}

# Statuses every authenticated operation can answer, whatever it does.
_API_STATUSES = (400, 401, 413, 429, 500, 503)
# Operations that change state the simulator or the delivery log holds can meet a conflict.
_CONFLICT_MARKERS = ("/simulator/", "/bookings", "/offers/", "/vehicles/", "/nodes/",
                     "/webhook_deliveries/", "/webhook_test")


# Operations that count against an organisation's quotas: what they create, and the events
# they store (quota_simulations, quota_templates, quota_event_bytes, quota_vehicles_per_run).
_CREATES = ("/api/v2/simulation", "/api/v2/simulation_template")
_EVENT_MARKERS = ("/bookings", "/offers/", "/vehicles/", "/nodes/")


def _describe(status: int, codes: Iterable[str] | None = None) -> str:
    if codes is None:
        codes = (code for code, spec in ERRORS.items() if spec.http_status == status)
    codes = sorted(set(codes))
    listed = ", ".join(f"`{code}`" for code in codes) or f"`http_{status}`"
    return f"Error ({listed}); see docs/errors.md."


def _error_response(status: int, codes: Iterable[str] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": _describe(status, codes),
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if status in (429, 503):
        response["headers"] = {"Retry-After": {
            "description": "Seconds to wait before retrying.", "schema": {"type": "integer"},
        }}
    return response


def _forbidden_codes(path: str, method: str) -> set[str]:
    """The codes a 403 of this operation can carry: a cross-site write on any state-changing
    operation (api/crosssite.py), not_owner on a shared template, an organisation's quotas."""
    codes: set[str] = set()
    if method.upper() in STATE_CHANGING:
        codes.add("cross_origin_refused")
    if path.startswith("/api/v2/simulation_template/") and method in ("patch", "delete"):
        codes.add("not_owner")
    if _counts_against_quota(path, method):
        codes.update(code for code, spec in ERRORS.items()
                     if spec.http_status == 403 and code.startswith("quota_"))
    return codes


def _counts_against_quota(path: str, method: str) -> bool:
    return method == "post" and (path in _CREATES or path.endswith("/events")
                                 or path.endswith("/simulator/start")
                                 or any(marker in path for marker in _EVENT_MARKERS))


def _statuses(path: str, method: str) -> set[int]:
    if not path.startswith("/api/v2/"):
        return {431, 500}  # 431: any request's head (api/http_guard.py)
    statuses = {*_API_STATUSES, 431}
    if "{" in path:
        statuses.add(404)
    if method == "patch":
        statuses.update({404, 412})
    if _forbidden_codes(path, method):
        statuses.add(403)  # see _forbidden_codes
    if method.upper() in STATE_CHANGING:
        statuses.add(415)  # a body not labelled JSON (api/crosssite.py)
    if method == "post" and path.startswith("/api/v2/simulation") and "template_id" not in path:
        statuses.add(404)  # a template_id or simulation that is not visible
    if any(marker in path for marker in _CONFLICT_MARKERS):
        statuses.add(409)
    return statuses


def build_openapi(app: FastAPI, *, max_batch_events: int) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (see the module docstring)."""
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes,
    )
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    event = event_json_schema()
    schemas.update(event.pop("$defs", {}))
    schemas["Event"] = event
    schemas["EventIn"] = _incoming(event, schemas)
    schemas["Error"] = ERROR_SCHEMA
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    components["securitySchemes"] = SECURITY_SCHEMES
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status in sorted(_statuses(path, method)):
                codes = _forbidden_codes(path, method) if status == 403 else None
                responses.setdefault(str(status), _error_response(status, codes))
            if path.startswith("/api/v2/"):
                operation["security"] = [{"basicAuth": []}, {"tokenAuth": []}, {"bearerAuth": []}]
    _ingest_limits(schema, max_batch_events)
    without_null_defaults(schemas)  # events/schema.py: as generators read them by default
    _plain_text(schema, "/metrics")
    for path in ("/healthz", "/readyz"):
        operation = schema["paths"].get(path, {}).get("get")
        if operation is not None:
            operation["responses"]["503"] = {"description": "The store (or the bus) does not "
                                                            "answer."}
    return schema


def _incoming(event: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    """``Event`` as ingest takes it: ``simulation_id`` may be left out (the path's is used),
    ``server_ts`` left out or null (the time of receipt is filled in; gps_data keeps none),
    and ``event_id`` is ignored (the log assigns it). One ``<Variant>In`` per event type."""
    options, mapping = [], {}
    for option in event["oneOf"]:
        name = option["$ref"].rsplit("/", 1)[1]
        variant = copy.deepcopy(schemas[name])
        variant["title"] = f"{name}In"
        variant["required"] = [field for field in variant.get("required", [])
                               if field not in ("simulation_id", "server_ts")]
        props = variant["properties"]
        props["simulation_id"] = {**props["simulation_id"], "description":
                                  "Optional: the path's; a different one is a 400."}
        props["server_ts"] = {
            "anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}],
            "description": "Filled with the time of receipt when absent or null "
                           "(except for gps_data).",
        }
        props["event_id"] = {"description": "Ignored: the event log assigns event_id."}
        schemas[f"{name}In"] = variant
        ref = f"#/components/schemas/{name}In"
        options.append({"$ref": ref})
        for value, target in event["discriminator"]["mapping"].items():
            if target == option["$ref"]:
                mapping[value] = ref
    return {"oneOf": options, "discriminator": {
        "propertyName": event["discriminator"]["propertyName"], "mapping": mapping}}


def _ingest_limits(schema: dict[str, Any], max_batch_events: int) -> None:
    operation = schema["paths"].get("/api/v2/simulation/{simulation_id}/events", {}).get("post")
    if operation is None:
        return
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    for option in body.get("oneOf", []):
        if option.get("type") == "array":
            option["minItems"] = 1
            option["maxItems"] = max_batch_events


def _plain_text(schema: dict[str, Any], path: str) -> None:
    operation = schema["paths"].get(path, {}).get("get")
    if operation is not None:
        operation["responses"]["200"] = {
            "description": "Prometheus text exposition format.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
