"""Standard Webhooks signing: ``webhook-signature`` for a body, and its verification (pure).

Shared by the dispatcher (which signs) and the client SDK (which verifies), so it imports
nothing from the server. The scheme is the one `Standard Webhooks
<https://www.standardwebhooks.com/>`_ defines, so any stock verifier accepts our deliveries::

    signed content = "{webhook-id}.{webhook-timestamp}.{body}"
    signature      = "v1," + base64(HMAC-SHA256(base64decode(secret without "whsec_"), content))

Example::

    headers = sign_headers("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_42", 1700000000, body)
    verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", headers, body)  # raises if wrong
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping

SECRET_PREFIX = "whsec_"
HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE_S = 5 * 60


class SignatureError(ValueError):
    """Raised by ``verify`` when headers are missing, stale, or no signature matches."""


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_...`` secret; ValueError when it is not base64."""
    raw = secret[len(SECRET_PREFIX):] if secret.startswith(SECRET_PREFIX) else secret
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("webhook secret must be 'whsec_' followed by base64") from exc


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of one delivery."""
    content = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    digest = hmac.new(key, content, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def sign_headers(
    secret: str | None, msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers (no signature when ``secret`` is None)."""
    headers = {HEADER_ID: msg_id, HEADER_TIMESTAMP: str(timestamp)}
    if secret:
        headers[HEADER_SIGNATURE] = signature(secret_key(secret), msg_id, timestamp, body)
    return headers


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> None:
    """Check a received delivery's signature; raises ``SignatureError`` when it is not ours.

    ``headers`` may use any case. The timestamp must be within ``tolerance_s`` of ``now``
    (replay protection); any one of several space-separated signatures may match, which is
    how a receiver keeps working while a secret is rotated.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id = lower[HEADER_ID]
        timestamp = int(lower[HEADER_TIMESTAMP])
        sent = lower[HEADER_SIGNATURE]
    except (KeyError, ValueError) as exc:
        raise SignatureError(f"missing or malformed webhook header: {exc}") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise SignatureError("webhook-timestamp is outside the tolerance")
    expected = signature(secret_key(secret), msg_id, timestamp, body)
    for candidate in sent.split():
        if hmac.compare_digest(candidate, expected):
            return
    raise SignatureError("no webhook-signature matches")


__all__ = [
    "HEADER_ID",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "SignatureError",
    "sign_headers",
    "signature",
    "verify",
]
