"""JSON Schema documents of the events, generated from the models (never by hand); the AsyncAPI
document is in ``asyncapi.py``.

Every document is written for code generators with their default options: an optional field
carries no ``default: null`` (openapi-typescript makes a field with a default required), and a
UUID is ``format: uuid`` without a ``pattern`` (datamodel-codegen warns that it drops it).
"""

from __future__ import annotations

from typing import Any

from .envelope import EVENT_ADAPTER, EVENT_MODELS
from .types import MessageType

TYPE_NAMES = frozenset(t.value for t in MessageType)

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def event_schemas() -> dict[str, Any]:
    """One JSON Schema document of every event: ``oneOf`` the 18 types (discriminated by
    ``message_type``), each a definition in ``$defs``."""
    doc: dict[str, Any] = {"$schema": SCHEMA_DIALECT, "title": "ridecast event",
                           **EVENT_ADAPTER.json_schema()}
    without_null_defaults(doc)
    return doc


def type_schema(message_type: str) -> dict[str, Any]:
    """The JSON Schema document of one message type (raises KeyError for an unknown one)."""
    model = EVENT_MODELS[MessageType(message_type)] if message_type in TYPE_NAMES else None
    if model is None:
        raise KeyError(message_type)
    doc: dict[str, Any] = {"$schema": SCHEMA_DIALECT, **model.model_json_schema()}
    without_null_defaults(doc)
    return doc


def without_null_defaults(schema: Any) -> Any:
    """``schema`` with every ``"default": null`` removed, in place (an optional property is
    null when absent anyway), and returned."""
    if isinstance(schema, dict):
        if "default" in schema and schema["default"] is None:
            del schema["default"]
        for value in schema.values():
            without_null_defaults(value)
    elif isinstance(schema, list):
        for value in schema:
            without_null_defaults(value)
    return schema
