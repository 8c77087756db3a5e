"""The outbox watch: wakes a dispatcher that no bus tells of new deliveries.

A ``ridecast worker`` on the in-process bus (the embedded default: no ``RIDECAST_BUS_URL``)
hears nothing of the rows ``ridecast serve`` commits. Without this watch it found them by
its poll, once a second, so each delivery waited up to a second after its event was
committed. The watch reads the outbox's newest delivery id every ``interval_s`` (one read
of the primary key's last entry: no write, no lock a writer waits for, in SQLite's WAL mode
or on PostgreSQL) and calls ``on_new`` when it has changed.

Changed, not grown: SQLite gives the ids of purged rows at the top of the table out again.
A change the watch misses (the newest row purged and its id given to a new row between two
reads) leaves that row to the poll, as rows that come due later (retries, leases running
out) are.

The reads themselves, one per store, are ``store.newest_id``'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# At most one warning per this many seconds while the store cannot be read.
WARN_EVERY_S = 60.0
# After failed reads, the watch waits twice as long each time, up to this (the poll's period).
MAX_RETRY_S = 1.0


def retry_wait(previous_s: float, *, cap_s: float | None = None) -> float:
    """The wait before the next read after a failed one: twice the previous wait, up to
    ``cap_s`` (``MAX_RETRY_S``)."""
    return min(MAX_RETRY_S if cap_s is None else cap_s, previous_s * 2)


class OutboxWatch:
    """Calls ``on_new`` once per ``interval_s`` in which the newest delivery id changed."""

    def __init__(self, newest_id: Callable[[], Awaitable[int]],
                 on_new: Callable[[], None] | None = None, *, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("the watch interval must be positive")
        self._newest_id = newest_id
        self._on_new = on_new
        self._interval_s = interval_s
        self._seen: int | None = None
        self._warned_at = float("-inf")

    async def check(self) -> bool:
        """Read the newest id once; True (and ``on_new`` called) when it changed since the
        last read. The first read only sets the mark: the poll that starts every
        dispatcher claims what was there before."""
        newest = await self._newest_id()
        changed = self._seen is not None and newest != self._seen
        self._seen = newest
        if changed and self._on_new is not None:
            self._on_new()
        return changed

    async def run(self, on_new: Callable[[], None] | None = None) -> None:
        """``check`` every ``interval_s`` until cancelled. A failed read (the store
        unreachable, or refusing the watch's own connection) is retried after twice the
        wait of the one before, up to ``MAX_RETRY_S``, so that a store that is down is not
        asked 100 times a second; the poll still finds the rows meanwhile. It warns at most
        once a minute. ``on_new``: whom to call from now on (the dispatcher's ``wake``)."""
        if on_new is not None:
            self._on_new = on_new
        wait = self._interval_s
        while True:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                wait = retry_wait(wait)
                now = time.monotonic()
                if now - self._warned_at >= WARN_EVERY_S:
                    self._warned_at = now
                    log.warning("reading the outbox's newest delivery failed; retrying in "
                                "up to %.0f s", MAX_RETRY_S, exc_info=True)
            else:
                wait = self._interval_s
            await asyncio.sleep(wait)

    async def close(self) -> None:
        """Close the reader's own connection, if it has one (the pool's reader has none)."""
        aclose = getattr(self._newest_id, "aclose", None)
        if aclose is not None:
            await aclose()
