"""JSON Schema documents of the events, generated from the models (never by hand); the AsyncAPI
document is in ``asyncapi.py``."""

from __future__ import annotations

from typing import Any

from .envelope import EVENT_ADAPTER, EVENT_MODELS

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def event_schemas() -> dict[str, Any]:
    """One JSON Schema per message type, keyed by type, plus ``Event`` (the union)."""
    out: dict[str, Any] = {"$schema": SCHEMA_DIALECT, "title": "ridecast events", "types": {}}
    for message_type, model in EVENT_MODELS.items():
        out["types"][message_type.value] = model.model_json_schema()
    out["Event"] = EVENT_ADAPTER.json_schema()
    return out
