"""JSON Schema and AsyncAPI documents, generated from the event models (never by hand)."""

from __future__ import annotations

from typing import Any

from .. import __version__
from .envelope import EVENT_ADAPTER, EVENT_MODELS
from .types import MessageType

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def event_schemas() -> dict[str, Any]:
    """One JSON Schema per message type, keyed by type, plus ``Event`` (the union)."""
    out: dict[str, Any] = {"$schema": SCHEMA_DIALECT, "title": "ridecast events", "types": {}}
    for message_type, model in EVENT_MODELS.items():
        out["types"][message_type.value] = model.model_json_schema()
    out["Event"] = EVENT_ADAPTER.json_schema()
    return out


def asyncapi_document() -> dict[str, Any]:
    """AsyncAPI 2.6: the websocket channels of the interface and the webhook messages."""
    components: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for message_type, model in EVENT_MODELS.items():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in schema.pop("$defs", {}).items():
            components[name] = definition
        components[model.__name__] = schema
        messages[message_type.value] = {
            "name": message_type.value,
            "title": model.__name__,
            "summary": (model.__doc__ or "").strip().splitlines()[0],
            "contentType": "application/json",
            "payload": {"$ref": f"#/components/schemas/{model.__name__}"},
        }
    all_messages = {"oneOf": [{"$ref": f"#/components/messages/{t.value}"} for t in MessageType]}
    token = {
        "token": {
            "description": "Token from GET /api/v2/user/token/ (or an Authorization header).",
            "schema": {"type": "string", "format": "uuid"},
        },
        "since": {
            "description": "Replay events after this event_id, then go live.",
            "schema": {"type": "string"},
        },
    }
    sim = {"description": "Simulation id (integer).", "schema": {"type": "integer"}}
    typ = {
        "description": "Event type (lower case).",
        "schema": {"type": "string", "enum": [t.value for t in MessageType]},
    }

    def channel(description: str, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "description": description,
            "parameters": params,
            "bindings": {"ws": {"query": {"type": "object", "properties": {
                k: v["schema"] for k, v in token.items()}}}},
            "subscribe": {"message": all_messages},
        }

    return {
        "asyncapi": "2.6.0",
        "info": {
            "title": "ridecast event streams and webhooks",
            "version": __version__,
            "description": "Each websocket text frame is one event envelope plus event_id; "
            "each webhook POST body is one envelope.",
        },
        "defaultContentType": "application/json",
        "channels": {
            "/simulation_events/": channel("All events of all visible simulations.", {}),
            "/simulation_events/{simulation_id}": channel(
                "All events of one simulation.", {"simulation_id": sim}
            ),
            "/simulation_events/{type}": channel(
                "Events of one type from all visible simulations.", {"type": typ}
            ),
            "/simulation_events/{simulation_id}/{type}": channel(
                "Events of one type from one simulation (either segment order).",
                {"simulation_id": sim, "type": typ},
            ),
            "messaging_webhook_url": {
                "description": "Webhook: POST to the simulation's data.messaging_webhook_url "
                "for each event whose type is in data.messaging_webhook_message_types.",
                "subscribe": {"message": all_messages},
            },
        },
        "components": {"schemas": components, "messages": messages},
    }
