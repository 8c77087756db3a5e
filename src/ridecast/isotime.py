"""ISO 8601 timestamps in UTC as ``datetime.isoformat`` writes them, with the date and time of
day formatted once per second (pure): the simulator stamps every event it emits, ingest
every event it receives without a ``server_ts``."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache


@lru_cache(maxsize=4096)
def second_prefix(second: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of unix second ``second``, in UTC."""
    return datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")[:-6]


def iso_from_ns(ns: int) -> str:
    """``ns`` nanoseconds after the epoch as ``datetime.isoformat()`` writes it in UTC (the
    microseconds floored, as ``datetime.now`` takes them, and left out when zero)."""
    second, micros = divmod(ns // 1000, 1_000_000)
    prefix = second_prefix(second)
    return f"{prefix}.{micros:06d}+00:00" if micros else f"{prefix}+00:00"
