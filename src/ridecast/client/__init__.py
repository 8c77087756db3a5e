"""The ridecast Python SDK: REST calls, resumable event streams and webhook verification.

``AsyncClient`` (asyncio) and ``Client`` (blocking) share one surface::

    async with AsyncClient() as client:     # $RIDECAST_URL, $RIDECAST_USER, $RIDECAST_API_KEY
        async for event in client.stream(simulation_id=1, types=["assignment"]):
            print(event.event_id, event.data.vehicle_id)

Every exception is a ``ClientError`` (tree in ``ridecast.client.errors``). This package
imports only the pure parts of ridecast (``ridecast.events``, ``ridecast.errors``), never the
server side.
"""

from __future__ import annotations

from .aio import AsyncClient
from .backoff import Action, Backoff, classify_close
from .errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ClientError,
    ConflictError,
    CursorExpired,
    GoneError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    PreconditionFailedError,
    ServerError,
    StreamAuthError,
    StreamClosed,
    StreamNotFound,
    TransportError,
    WebhookVerificationError,
)
from .models import EventPage, Simulation
from .stream import EventStream, Frame, StreamStatus
from .sync import Client
from .webhooks import parse_webhook, verify_webhook

__all__ = [
    "APIError",
    "Action",
    "AsyncClient",
    "AuthenticationError",
    "Backoff",
    "BadRequestError",
    "Client",
    "ClientError",
    "ConflictError",
    "CursorExpired",
    "EventPage",
    "EventStream",
    "Frame",
    "GoneError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "ServerError",
    "Simulation",
    "StreamAuthError",
    "StreamClosed",
    "StreamNotFound",
    "StreamStatus",
    "TransportError",
    "WebhookVerificationError",
    "classify_close",
    "parse_webhook",
    "verify_webhook",
]
