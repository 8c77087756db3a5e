"""Verify a webhook request from ridecast (Standard Webhooks signatures), then parse it.

ridecast signs deliveries when the simulation's ``data.messaging_webhook_secret`` is set::

    webhook-id: msg_...            (the same on every retry: deduplicate on it)
    webhook-timestamp: 1763780000  (seconds since the epoch)
    webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">

The key is the base64 after ``whsec_`` in the secret. Several space-separated signatures may
be present (during a secret rotation); one valid signature is enough. A timestamp more than
five minutes from now is refused, so a captured request cannot be replayed later. The
algorithm is the server's own (``ridecast.events.signing``, pure, shared), so the SDK and
the dispatcher cannot drift apart.

Usage, in any web framework (pass the raw body bytes, not re-serialised JSON)::

    event = parse_webhook(SECRET, request.headers, await request.body())
    print(event.message_type, event.data)
"""

from __future__ import annotations

from collections.abc import Mapping

from ..events import Envelope, parse_event_json, signing
from .errors import WebhookVerificationError

DEFAULT_TOLERANCE_S = signing.DEFAULT_TOLERANCE_S


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> None:
    """Check a webhook request's signature and timestamp; raise ``WebhookVerificationError``.

    ``headers`` is any mapping (names match case-insensitively); ``body`` the raw body.
    """
    raw = body.encode() if isinstance(body, str) else body
    try:
        signing.verify(secret, headers, raw, now=now, tolerance_s=tolerance_s)
    except ValueError as exc:  # SignatureError, or a secret that is not whsec_ + base64
        raise WebhookVerificationError(str(exc)) from None


def parse_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> Envelope:
    """Verify a webhook request, then return its body as a typed event model."""
    verify_webhook(secret, headers, body, tolerance_s=tolerance_s, now=now)
    return parse_event_json(body)
