"""The AsyncAPI 3.0 document of the websocket streams and the webhook, built from the models.

Every payload schema comes from the pydantic event models (``EVENT_MODELS``); this module
only lays out what AsyncAPI needs around them: the 18 messages (keyed by their type, which
AsyncAPI 3 uses as the message id), the five path shapes of the interface as channels
(docs/websockets.md), one ``send`` operation per channel (keyed by its id), the webhook,
the servers and the two ways of passing the token. tests/events/test_asyncapi.py parses it
with the official parser (@asyncapi/parser) and fails on any error or unlisted warning.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from .envelope import EVENT_MODELS
from .schema import without_null_defaults
from .types import MessageType

# 3.0.0: the newest version that code generators read (Modelina reads nothing of a 3.1.0
# document), and this document uses nothing that 3.1 added.
ASYNCAPI_VERSION = "3.0.0"

# Channel id -> (address, what it delivers, its parameters). Every shape also answers with
# a trailing slash; the interface writes the first one as /simulation_events/.
_SHAPES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "allEvents": ("/simulation_events",
                  "All events of all simulations visible to the user (the interface writes it "
                  "/simulation_events/; both forms are served).", ()),
    "simulationEvents": ("/simulation_events/{simulation_id}",
                         "All events of one simulation, if visible to the user.",
                         ("simulation_id",)),
    "typeEvents": ("/simulation_events/{type}",
                   "Events of one type from all simulations visible to the user.", ("type",)),
    "simulationTypeEvents": ("/simulation_events/{simulation_id}/{type}",
                             "Events of one type from one simulation.",
                             ("simulation_id", "type")),
    "typeSimulationEvents": ("/simulation_events/{type}/{simulation_id}",
                             "The same as simulationTypeEvents, segments in the other order.",
                             ("type", "simulation_id")),
}
_OPERATION_OF = {
    "allEvents": "streamAllEvents",
    "simulationEvents": "streamSimulationEvents",
    "typeEvents": "streamTypeEvents",
    "simulationTypeEvents": "streamSimulationTypeEvents",
    "typeSimulationEvents": "streamTypeSimulationEvents",
}
WEBHOOK_CHANNEL = "messaging_webhook_url"

_PARAMETERS = {
    "simulation_id": {"description": "A simulation id (a decimal integer)."},
    "type": {"description": "One of the 18 message types (lower case).",
             "enum": [t.value for t in MessageType]},
}

_QUERY = {
    "type": "object",
    "properties": {
        "token": {"type": "string", "format": "uuid",
                  "description": "A token of GET /api/v2/user/token/ (or send it in the "
                                 "Authorization header)."},
        "since": {"type": "string",
                  "description": "Replay the events after this event_id, then go live with "
                                 "no gap and no duplicate."},
    },
}

_WEBHOOK_HEADERS = {
    "type": "object",
    "properties": {
        "webhook-id": {"type": "string", "description": "msg_<event_id>: the same on every "
                                                        "retry (for idempotency)."},
        "webhook-timestamp": {"type": "string", "description": "Unix seconds of the attempt."},
        "webhook-signature": {"type": "string", "description": "v1,<base64 HMAC-SHA256>, "
                              "when data.messaging_webhook_secret is set (Standard Webhooks)."},
    },
    "required": ["webhook-id", "webhook-timestamp"],
}

SECURITY_SCHEMES = {
    "tokenQuery": {"type": "httpApiKey", "in": "query", "name": "token",
                   "description": "?token=<uuid> from GET /api/v2/user/token/ (browsers "
                                  "cannot set headers on websockets)."},
    "tokenHeader": {"type": "httpApiKey", "in": "header", "name": "Authorization",
                    "description": "Authorization: Bearer <uuid> (or Token <uuid>) with a "
                                   "token of GET /api/v2/user/token/."},
}
_STREAM_SECURITY = [{"$ref": f"#/components/securitySchemes/{name}"}
                    for name in SECURITY_SCHEMES]

_HOST = {"host": {"default": "127.0.0.1:8000",
                  "description": "The ridecast server's host and port (the API's, or "
                                 "RIDECAST_WS_PORT's)."}}
SERVERS = {
    "ridecast": {"host": "{host}", "protocol": "ws", "variables": _HOST,
                 "title": "ridecast websocket streams",
                 "summary": "Plain websocket streams of a ridecast server.",
                 "security": _STREAM_SECURITY},
    "ridecastTls": {"host": "{host}", "protocol": "wss", "variables": _HOST,
                    "title": "ridecast websocket streams over TLS",
                    "summary": "The same streams when the server has RIDECAST_TLS_*.",
                    "security": _STREAM_SECURITY},
    "webhookReceiver": {
        "host": "{receiver}", "protocol": "https",
        "title": "Your webhook receiver",
        "summary": "Where data.messaging_webhook_url points (http too, when allowed).",
        "variables": {"receiver": {"description": "Host of the simulation's "
                                                  "data.messaging_webhook_url."}},
    },
}


def _messages() -> tuple[dict[str, Any], dict[str, Any]]:
    """The 18 messages and the JSON Schemas of their payloads, from the event models."""
    schemas: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for message_type in MessageType:
        model = EVENT_MODELS[message_type]
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(without_null_defaults(schema.pop("$defs", {})))
        schemas[model.__name__] = without_null_defaults(schema)
        doc = (model.__doc__ or "").strip().splitlines()
        messages[message_type.value] = {
            "name": message_type.value,
            "title": model.__name__,
            "summary": doc[0] if doc else message_type.value,
            "contentType": "application/json",
            "payload": {"$ref": f"#/components/schemas/{model.__name__}"},
        }
    return messages, schemas


def _channel_messages() -> dict[str, Any]:
    return {t.value: {"$ref": f"#/components/messages/{t.value}"} for t in MessageType}


def _operation(channel: str, summary: str, **extra: Any) -> dict[str, Any]:
    return {
        "action": "send",
        "channel": {"$ref": f"#/channels/{channel}"},
        "summary": summary,
        "messages": [{"$ref": f"#/channels/{channel}/messages/{t.value}"} for t in MessageType],
        **extra,
    }


def asyncapi_document() -> dict[str, Any]:
    """The AsyncAPI 3.0 document (see the module docstring)."""
    messages, schemas = _messages()
    stream_servers = [{"$ref": "#/servers/ridecast"}, {"$ref": "#/servers/ridecastTls"}]
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for channel_id, (address, description, params) in _SHAPES.items():
        channels[channel_id] = {
            "address": address,
            "description": description,
            "servers": stream_servers,
            "messages": _channel_messages(),
            **({"parameters": {name: _PARAMETERS[name] for name in params}} if params else {}),
            "bindings": {"ws": {"query": _QUERY, "bindingVersion": "0.1.0"}},
        }
        operations[_OPERATION_OF[channel_id]] = _operation(
            channel_id, "ridecast sends each matching event as one websocket text frame: "
            "the envelope plus its event_id.",
            description="Refusals close the stream with a documented close code "
                        "(docs/errors.md): 4000-4099 do not reconnect, 4100-4199 and 1001 "
                        "reconnect with back-off and since=<last event_id>.",
            security=_STREAM_SECURITY,
        )
    channels[WEBHOOK_CHANNEL] = {
        "address": None,
        "title": "The simulation's webhook",
        "description": "POST to the simulation's data.messaging_webhook_url for each event "
                       "whose type is in data.messaging_webhook_message_types.",
        "servers": [{"$ref": "#/servers/webhookReceiver"}],
        # The same messages with the delivery's headers (the body has no event_id).
        "messages": {name: {**message, "traits": [
            {"$ref": "#/components/messageTraits/webhookHeaders"}]}
            for name, message in messages.items()},
    }
    operations["deliverWebhook"] = _operation(
        WEBHOOK_CHANNEL, "ridecast POSTs each matching event's envelope (without event_id).",
        description="Any 2xx within the timeout is success; 410 disables the webhook; other "
                    "answers are retried with back-off (docs/webhooks.md).",
        bindings={"http": {"method": "POST", "bindingVersion": "0.3.0"}},
    )
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "id": "urn:ridecast:events",
        "info": {
            "title": "ridecast event streams and webhooks",
            "version": __version__,
            "description": "Each websocket text frame is one event envelope plus event_id; "
                           "each webhook POST body is one envelope.",
            "license": {"name": "Apache-2.0",
                        "url": "https://www.apache.org/licenses/LICENSE-2.0"},
            "tags": [{"name": "events", "description": "The 18 event types of the interface."}],
        },
        "defaultContentType": "application/json",
        "servers": SERVERS,
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": schemas,
            "messages": messages,
            "securitySchemes": SECURITY_SCHEMES,
            "messageTraits": {"webhookHeaders": {
                "summary": "The Standard Webhooks headers of every delivery.",
                "headers": _WEBHOOK_HEADERS,
            }},
        },
    }
