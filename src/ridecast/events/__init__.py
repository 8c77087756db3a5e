"""The contract: pydantic models of the message envelope and the 18 payloads.

This package is the single source of truth for what an event looks like; the JSON Schema,
OpenAPI and AsyncAPI documents are generated from it (``ridecast.events.schema``).
"""

from __future__ import annotations

from .envelope import (
    EVENT_ADAPTER,
    EVENT_MODELS,
    PAYLOAD_MODELS,
    Envelope,
    Event,
    parse_event,
    parse_event_json,
)
from .types import (
    ALL_TYPES,
    PRODUCER_DEFAULTS,
    WEBHOOK_FILTER_TYPES,
    WEBSOCKET_TYPES,
    AgentType,
    MessageType,
)

__all__ = [
    "ALL_TYPES",
    "EVENT_ADAPTER",
    "EVENT_MODELS",
    "PAYLOAD_MODELS",
    "PRODUCER_DEFAULTS",
    "WEBHOOK_FILTER_TYPES",
    "WEBSOCKET_TYPES",
    "AgentType",
    "Envelope",
    "Event",
    "MessageType",
    "parse_event",
    "parse_event_json",
]
