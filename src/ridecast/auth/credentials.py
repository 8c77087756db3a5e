"""Parsing of the credentials a request presents (pure, no I/O).

REST: ``Authorization: Basic base64(user:api_key)`` (what clients of the original service
send) or ``Authorization: Token <api_key>``, or ``Authorization: Bearer <token>`` with a token
of ``GET /api/v2/user/token/`` (the dashboard's session: it never keeps the API key).
Websocket: ``?token=<uuid>`` or ``Authorization: Bearer|Token <uuid>``.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass

from ..errors import Unauthorized


@dataclass(frozen=True, slots=True)
class BasicCredentials:
    """A user name and API key from HTTP Basic."""

    username: str
    api_key: str


@dataclass(frozen=True, slots=True)
class KeyCredentials:
    """An API key from ``Authorization: Token``."""

    api_key: str


@dataclass(frozen=True, slots=True)
class TokenCredentials:
    """A token of ``GET /api/v2/user/token/`` from ``Authorization: Bearer`` (normalised)."""

    token: str


ApiCredentials = BasicCredentials | KeyCredentials


def parse_authorization(header: str | None) -> ApiCredentials | TokenCredentials:
    """Credentials of a REST request; raises ``Unauthorized`` with a precise message."""
    if not header or not header.strip():
        raise Unauthorized(
            "authentication required: send HTTP Basic (user name and API key) "
            "or 'Authorization: Token <api_key>'",
            code="not_authenticated",
        )
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    scheme = scheme.lower()
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthorized(
                "malformed HTTP Basic credentials", code="invalid_credentials"
            ) from None
        username, sep, api_key = decoded.partition(":")
        if not sep or not username or not api_key:
            raise Unauthorized(
                "HTTP Basic credentials must be 'user name:API key'", code="invalid_credentials"
            )
        return BasicCredentials(username, api_key)
    if scheme == "token" and value:
        return KeyCredentials(value)
    if scheme == "bearer" and value:
        try:
            return TokenCredentials(str(uuid.UUID(value)))
        except ValueError:
            raise Unauthorized("the bearer token is not a UUID", code="token_malformed") from None
    raise Unauthorized(
        "unsupported Authorization scheme: use Basic, Token or Bearer",
        code="invalid_credentials",
    )


def parse_ws_token(query_token: str | None, header: str | None) -> str:
    """The websocket token from ``?token=`` or ``Authorization``, normalised.

    Raises ``Unauthorized`` with code ``not_authenticated`` (none given) or
    ``token_malformed`` (not a UUID).
    """
    # An empty ?token= is no token: it must not hide a valid Authorization header.
    raw = query_token or None
    if raw is None and header:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() in ("bearer", "token"):
            raw = value.strip()
    if raw is None or raw == "":
        raise Unauthorized(
            "a token is required: GET /api/v2/user/token/ and pass it as ?token=",
            code="not_authenticated",
        )
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise Unauthorized("the token is not a UUID", code="token_malformed") from None
