"""Pure parts of the SDK: stream URLs, channel choice, frame headers and the webhook merge.

Nothing here does I/O, so the sync client, the async client and the CLI share it and the
tests can check it exhaustively.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import orjson

from ..events.types import ALL_TYPES, WEBHOOK_FILTER_TYPES
from ..events.webhook_settings import SECRET_KEY, TYPES_KEY, URL_KEY

WEBHOOK_KEYS = (URL_KEY, TYPES_KEY, SECRET_KEY)


def http_to_ws(url: str) -> str:
    """The websocket base address of an HTTP base address (http→ws, https→wss)."""
    parts = urlsplit(url.rstrip("/"))
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"not an http(s):// or ws(s):// address: {url!r}")
    return urlunsplit((scheme, parts.netloc, parts.path, "", ""))


@dataclass(frozen=True, slots=True)
class Channel:
    """Which path a stream opens and which types it keeps from what arrives.

    One type is filtered by the server (``/simulation_events/[sim/]type``). Several types use
    the simulation's (or the all) channel and are filtered here: one connection, one cursor,
    events in event_id order across types. ``keep`` is None when every frame is kept.
    """

    simulation_id: int | None
    path_type: str | None
    keep: frozenset[str] | None

    @property
    def path(self) -> str:
        """The websocket path, in the interface's ``/simulation_events/{id}/{type}`` shape."""
        segments = [str(self.simulation_id)] if self.simulation_id is not None else []
        if self.path_type is not None:
            segments.append(self.path_type)
        return "/simulation_events/" + "/".join(segments)

    def wants(self, message_type: str) -> bool:
        return self.keep is None or message_type in self.keep


def plan_channel(simulation_id: int | None, types: Iterable[str] | None) -> Channel:
    """The channel for a stream of ``types`` (None or empty: every type) of a simulation."""
    if simulation_id is not None and (isinstance(simulation_id, bool) or simulation_id < 0):
        raise ValueError(f"simulation_id must be a non-negative integer, not {simulation_id!r}")
    wanted = sorted(set(types or ()))
    unknown = [t for t in wanted if t not in ALL_TYPES]
    if unknown:
        raise ValueError(
            f"unknown event type(s): {', '.join(unknown)}; valid: {', '.join(sorted(ALL_TYPES))}"
        )
    if not wanted:
        return Channel(simulation_id, None, None)
    if len(wanted) == 1:
        return Channel(simulation_id, wanted[0], None)
    return Channel(simulation_id, None, frozenset(wanted))


def stream_url(ws_base: str, channel: Channel, token: str, since: str | None) -> str:
    """The full websocket URL: base + channel path + ``?token=`` and ``since=`` if resuming."""
    query = {"token": token}
    if since is not None:
        query["since"] = since
    return f"{ws_base.rstrip('/')}{channel.path}?{urlencode(query)}"


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The two fields of a frame the stream needs before handing it on."""

    event_id: str | None
    message_type: str | None
    body: dict[str, Any]


def read_frame(raw: str | bytes) -> FrameHeader:
    """Decode one websocket frame; raises ``ValueError`` when it is not a JSON object."""
    body = orjson.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("a frame must be a JSON object")
    event_id = body.get("event_id")
    message_type = body.get("message_type")
    return FrameHeader(
        str(event_id) if event_id is not None else None,
        message_type if isinstance(message_type, str) else None,
        body,
    )


def merge_webhook(
    data: Mapping[str, Any] | None,
    url: str,
    types: Iterable[str],
    secret: str | None = None,
) -> dict[str, Any]:
    """``data`` with the webhook keys set and every other key kept (the spec's rule 2).

    Without ``secret`` an existing secret is kept: changing the URL or the filter should not
    silently switch signing off.
    """
    wanted = list(dict.fromkeys(types))
    if not wanted:
        raise ValueError("give at least one message type (use clear_webhook to unsubscribe)")
    unknown = [t for t in wanted if t not in WEBHOOK_FILTER_TYPES]
    if unknown:
        raise ValueError(
            f"unknown message type(s): {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(WEBHOOK_FILTER_TYPES))}"
        )
    merged = dict(data or {})
    merged[URL_KEY] = url
    merged[TYPES_KEY] = wanted
    if secret is not None:
        merged[SECRET_KEY] = secret
    return merged


def without_webhook(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """``data`` with the webhook keys removed and every other key kept."""
    return {key: value for key, value in (data or {}).items() if key not in WEBHOOK_KEYS}


def split_types(values: Iterable[str]) -> list[str]:
    """Types given as repeated and/or comma-separated strings, in order, without repeats."""
    return list(dict.fromkeys(t.strip() for v in values for t in v.split(",") if t.strip()))
