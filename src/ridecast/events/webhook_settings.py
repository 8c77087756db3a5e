"""The webhook keys of a simulation's ``data``: names and validation (pure).

``data`` itself is free-form (the interface gives it no model); only the keys ridecast
reads are checked, so a bad webhook setting is refused at PATCH time, not at send time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import BadRequest
from .types import WEBHOOK_FILTER_TYPES

URL_KEY = "messaging_webhook_url"
TYPES_KEY = "messaging_webhook_message_types"
SECRET_KEY = "messaging_webhook_secret"
SECRET_PREFIX = "whsec_"
ORDERING_KEY = "messaging_webhook_ordering"
ORDERINGS = ("ordered", "unordered")


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """The webhook subscription a simulation's data defines."""

    url: str
    message_types: frozenset[str]
    secret: str | None = None
    ordered: bool = True

    def wants(self, message_type: str) -> bool:
        return message_type in self.message_types


def _bad(message: str, field: str, value: Any, **extra: Any) -> BadRequest:
    detail = {"field": f"data.{field}", "value": value, **extra}
    return BadRequest(message, code="invalid_simulation_data", details=[detail])


def validate_simulation_data(data: Any) -> dict[str, Any]:
    """Check ``data`` is an object and its webhook keys are valid; returns it unchanged."""
    if not isinstance(data, dict):
        raise BadRequest(
            f"data must be a JSON object, not {type(data).__name__}",
            code="invalid_simulation_data",
            details=[{"field": "data", "value": data}],
        )
    url = data.get(URL_KEY)
    if url is not None:
        if not isinstance(url, str):
            raise _bad(f"{URL_KEY} must be a string URL", URL_KEY, url)
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # "http://[::1": an unclosed IPv6 literal, ...
            raise _bad(f"{URL_KEY} is not a valid URL ({exc}): {url!r}", URL_KEY, url) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _bad(
                f"{URL_KEY} must be an http:// or https:// URL with a host, not {url!r}",
                URL_KEY,
                url,
            )
    types = data.get(TYPES_KEY)
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise _bad(f"{TYPES_KEY} must be an array of strings", TYPES_KEY, types)
        unknown = [t for t in types if t not in WEBHOOK_FILTER_TYPES]
        if unknown:
            raise _bad(
                f"unknown message type(s) in {TYPES_KEY}: {', '.join(map(repr, unknown))}; "
                f"valid values: {', '.join(sorted(WEBHOOK_FILTER_TYPES))}",
                TYPES_KEY,
                unknown,
                valid=sorted(WEBHOOK_FILTER_TYPES),
            )
    secret = data.get(SECRET_KEY)
    if secret is not None and (
        not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX) or len(secret) < 16
    ):
        raise _bad(
            f"{SECRET_KEY} must be 'whsec_' followed by base64 (Standard Webhooks format)",
            SECRET_KEY,
            "<redacted>",
        )
    ordering = data.get(ORDERING_KEY)
    if ordering is not None and ordering not in ORDERINGS:
        raise _bad(
            f"{ORDERING_KEY} must be one of {', '.join(map(repr, ORDERINGS))}, not {ordering!r}",
            ORDERING_KEY,
            ordering,
            valid=list(ORDERINGS),
        )
    return data


def webhook_settings(data: dict[str, Any]) -> WebhookSettings | None:
    """The subscription in ``data``, or None when it has no URL or no types."""
    url = data.get(URL_KEY)
    types = data.get(TYPES_KEY)
    if not isinstance(url, str) or not isinstance(types, list) or not types:
        return None
    secret = data.get(SECRET_KEY)
    return WebhookSettings(
        url=url,
        message_types=frozenset(t for t in types if isinstance(t, str)),
        secret=secret if isinstance(secret, str) else None,
        ordered=data.get(ORDERING_KEY) != "unordered",
    )
