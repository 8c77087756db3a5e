"""Websocket path parsing (pure): which simulation and which type a stream asks for.

The interface has five path shapes under ``/simulation_events``::

    /simulation_events/                              every visible simulation, every type
    /simulation_events/{simulation_id}               one simulation, every type
    /simulation_events/{type}                        every visible simulation, one type
    /simulation_events/{simulation_id}/{type}        one simulation, one type
    /simulation_events/{type}/{simulation_id}        the same, other order

each with or without a trailing slash. An integer segment is a simulation id, any other
segment is a type; a type must be one of the 18 (docs/design.md decision 4). Anything else is
refused: ``unknown_event_type`` for a well-formed path naming an unknown type,
``malformed_path`` for the rest (wrong prefix, empty segment, two ids, two types, too many
segments).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from ..errors import BadRequest, NotFound
from ..events.types import WEBSOCKET_TYPES

PREFIX = "/simulation_events"

# Simulation ids are database integers; a longer digit string cannot name one, and
# refusing it here keeps an absurd number from reaching the database layer.
_MAX_ID_DIGITS = 18

# A segment shaped like a type name but not one of the 18 is an unknown type; anything
# else that is not an id ("-1", "1.5", "a b") is a malformed path.
_TYPE_LIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True, slots=True)
class Route:
    """What a stream subscribes to: ``None`` means "every" for that dimension."""

    simulation_id: int | None = None
    message_type: str | None = None

    def matches(self, simulation_id: int, message_type: str) -> bool:
        """Whether an event of this simulation and type belongs to the stream."""
        return (self.simulation_id is None or self.simulation_id == simulation_id) and (
            self.message_type is None or self.message_type == message_type
        )

    @property
    def channel(self) -> str:
        """A short label for logs and metrics: ``all``, ``sim``, ``type`` or ``sim_type``."""
        if self.simulation_id is None:
            return "all" if self.message_type is None else "type"
        return "sim" if self.message_type is None else "sim_type"


def _malformed(path: str, why: str) -> NotFound:
    return NotFound(f"malformed websocket path {path!r}: {why}", code="malformed_path")


def _is_id(segment: str) -> bool:
    return segment.isascii() and segment.isdigit() and len(segment) <= _MAX_ID_DIGITS


def parse_path(path: str) -> Route:
    """The route of a websocket request path (without query string).

    Raises ``NotFound`` with code ``malformed_path`` or ``unknown_event_type``.
    """
    if path != PREFIX and not path.startswith(PREFIX + "/"):
        raise _malformed(path, f"streams live under {PREFIX}/")
    rest = path[len(PREFIX):]
    if rest.endswith("/"):
        rest = rest[:-1]
    if rest == "":
        return Route()
    # rest starts with "/" here; splitting gives a leading empty string.
    segments = [unquote(s) for s in rest[1:].split("/")]
    if len(segments) > 2:
        raise _malformed(path, "at most two segments: a simulation id and/or a type")
    if any(s == "" for s in segments):
        raise _malformed(path, "empty path segment")
    ids = [s for s in segments if _is_id(s)]
    names = [s for s in segments if not _is_id(s)]
    if len(ids) > 1:
        raise _malformed(path, "two simulation ids")
    if len(names) > 1:
        raise _malformed(path, "two types")
    message_type: str | None = None
    if names:
        name = names[0]
        if name not in WEBSOCKET_TYPES:
            if not _TYPE_LIKE.fullmatch(name):
                raise _malformed(path, f"{name!r} is neither a simulation id nor a type")
            raise NotFound(
                f"unknown event type {name!r}; valid types: {', '.join(sorted(WEBSOCKET_TYPES))}",
                code="unknown_event_type",
            )
        message_type = name
    simulation_id = int(ids[0]) if ids else None
    return Route(simulation_id=simulation_id, message_type=message_type)


def parse_since(value: str | None) -> int | None:
    """The ``since=`` cursor: None when absent, else a non-negative event_id.

    Raises ``BadRequest`` with code ``invalid_cursor``.
    """
    if value is None:
        return None
    if value.isascii() and value.isdigit() and len(value) <= _MAX_ID_DIGITS:
        return int(value)
    raise BadRequest(f"since={value!r} is not an event_id", code="invalid_cursor")
