"""How the API shows simulations and templates (JSON views of the store's records).

A row can hold what no response can encode: a lone surrogate stored before the edge decoded
strictly, or put into the store by other means. One such row must not take every listing
of its organisation down, so the views render stored text safely: each lone surrogate
becomes U+FFFD, the rest of the row unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ..store.simulations import SimulationRecord, TemplateRecord


def simulation_json(record: SimulationRecord) -> dict[str, Any]:
    """A simulation as the API shows it."""
    return {
        "id": record.id,
        "name": renderable(record.name),
        "data": renderable(record.data),
        "template_id": record.template_id,
        "owner_id": record.owner_id,
        "organisation_id": record.org_id,
        "version": record.version,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "messaging_webhook_disabled_at": (
            _iso(record.webhook_disabled_at) if record.webhook_disabled_at else None
        ),
        "messaging_webhook_disabled_reason": record.webhook_disabled_reason,
    }


def template_json(record: TemplateRecord) -> dict[str, Any]:
    """A template as the API shows it."""
    return {
        "id": record.id,
        "name": renderable(record.name),
        "data": renderable(record.data),
        "owner_id": record.owner_id,
        "organisation_id": record.org_id,
        "version": record.version,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at or record.created_at),
    }


def list_meta(limit: int, offset: int, total: int, count: int,
              truncated: bool) -> dict[str, Any]:
    """A list's ``meta``: the paging asked for, the total, and where the next page starts
    (``next_offset``, null after the last); ``truncated`` when the byte budget
    (``RIDECAST_MAX_PAGE_BYTES``) ended the page before ``limit``."""
    end = offset + count
    return {"limit": limit, "offset": offset, "total_count": total,
            "next_offset": end if end < total else None, "truncated": truncated}


# A ``str`` holds a surrogate code point only when it is lone: a decoder joins a valid pair
# into one astral character.
_SURROGATE = re.compile("[\ud800-\udfff]")


def renderable(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings and keys replaced by U+FFFD.

    orjson refuses to encode a lone surrogate (and an integer beyond 64 bits, which the
    response encoder renders fine): when it encodes ``value`` there is nothing to repair
    and ``value`` itself is returned, so a sound row costs one C-speed encode.
    """
    try:
        orjson.dumps(value)
    except TypeError:
        return _repaired(value)
    return value


def _repaired(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_repaired(k): _repaired(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_repaired(v) for v in value]
    return value


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat()


__all__ = ["list_meta", "renderable", "simulation_json", "template_json"]
