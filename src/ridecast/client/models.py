"""Values the SDK returns: a simulation with its ETag, a page of event history, settings."""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..events import Envelope
from ..events.webhook_settings import SECRET_KEY, TYPES_KEY, URL_KEY
from .nodes import split_urls
from .protocol import http_to_ws

DEFAULT_URL = "http://127.0.0.1:8000"
ENV_URL = "RIDECAST_URL"
ENV_WS_URL = "RIDECAST_WS_URL"
ENV_USER = "RIDECAST_USER"
ENV_KEY = "RIDECAST_API_KEY"


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the server is and who we are; missing values come from the environment.

    ``url`` defaults to ``$RIDECAST_URL`` or http://127.0.0.1:8000, ``ws_url`` (only needed
    when websockets are served on another address) to ``$RIDECAST_WS_URL`` or the same host,
    ``user`` to ``$RIDECAST_USER`` and ``key`` to ``$RIDECAST_API_KEY``. With a user name the
    SDK sends HTTP Basic (user, key); with a key alone, ``Authorization: Token <key>``.

    Either address may name several nodes of one cluster, as a list or one comma-separated
    string: ``urls`` and ``ws_urls`` hold them all (``client/nodes.py`` says how the SDK
    fails over between them), ``url`` and ``ws_url`` the first.
    """

    url: str
    ws_url: str | None
    user: str | None
    key: str | None
    urls: tuple[str, ...] = ()
    ws_urls: tuple[str, ...] = ()

    @classmethod
    def resolve(
        cls,
        url: str | Sequence[str] | None = None,
        user: str | None = None,
        key: str | None = None,
        ws_url: str | Sequence[str] | None = None,
    ) -> Connection:
        urls = split_urls(url or os.environ.get(ENV_URL) or DEFAULT_URL)
        ws_given = ws_url or os.environ.get(ENV_WS_URL)
        ws_urls = split_urls(ws_given) if ws_given else ()
        return cls(
            url=urls[0],
            ws_url=ws_urls[0] if ws_urls else None,
            user=user or os.environ.get(ENV_USER) or None,
            key=key or os.environ.get(ENV_KEY) or None,
            urls=urls,
            ws_urls=ws_urls,
        )

    def stream_bases(self) -> tuple[str, ...]:
        """The websocket base address of every node (``ws_urls``, else from ``urls``)."""
        return tuple(http_to_ws(url) for url in (self.ws_urls or self.urls or (self.url,)))

    def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header for the REST API (empty without a key)."""
        if not self.key:
            return {}
        if self.user:
            pair = base64.b64encode(f"{self.user}:{self.key}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {"Authorization": f"Token {self.key}"}


@dataclass(frozen=True, slots=True)
class Simulation:
    """A simulation as the API shows it, with the ``etag`` to send back in ``If-Match``."""

    id: int
    name: str
    data: dict[str, Any]
    etag: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any], etag: str | None = None) -> Simulation:
        data = body.get("data")
        return cls(
            id=int(body["id"]),
            name=str(body.get("name", "")),
            data=data if isinstance(data, dict) else {},
            etag=etag,
            raw=body,
        )

    @property
    def webhook_url(self) -> str | None:
        value = self.data.get(URL_KEY)
        return value if isinstance(value, str) else None

    @property
    def webhook_types(self) -> list[str]:
        value = self.data.get(TYPES_KEY)
        return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []

    @property
    def webhook_signed(self) -> bool:
        return isinstance(self.data.get(SECRET_KEY), str)

    @property
    def webhook_disabled_at(self) -> str | None:
        value = self.raw.get("messaging_webhook_disabled_at")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class EventPage:
    """One page of a simulation's history; pass ``next_after`` as ``after`` for the next."""

    events: list[Envelope]
    next_after: str | None
    meta: dict[str, Any] = field(repr=False)
