"""Where the quotas' shared counts live: this process (embedded) or the cluster's Redis.

Three things must be shared between the nodes of a cluster, and only these (the runs,
simulations and templates are counted in the store, which every node reads):

* a lock per organisation and kind (``lock``), held while a node counts the organisation's
  runs or simulations in the store and adds one, so that two nodes cannot both take the
  last slot;
* a token bucket per organisation for the simulator's events per second (``take_events``);
* the stored event bytes per organisation (``exchange_bytes``: a node adds what it
  appended and learns the cluster's totals; ``replace_bytes`` after a recount).

``MemoryQuotaCounts`` keeps them in this process (``RIDECAST_BUS_URL=memory://``, one
process is the service); ``RedisQuotaCounts`` on Redis, and on this node's own counts while
Redis does not answer (as the other limits do: ``redis.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from ..config import Settings
from .quotas import TokenBucket

log = logging.getLogger(__name__)

LOCK_HOLD_S = 30.0
"""A lock whose holder died is free again after this long (a start holds it far less)."""
LOCK_WAIT_S = 10.0
"""Longest wait for a lock before a 503 (another start of the organisation is that slow)."""

RETRY_S = 1.0
"""While Redis does not answer, it is tried again at most this often (between, the local
counts answer at once: a run's events do not wait for Redis's time-out each time)."""

class QuotaCounts(Protocol):
    """The counts the quotas share between the nodes (see the module docstring)."""

    @property
    def mode(self) -> str:
        """``memory``, ``redis`` or ``local fallback``."""

    def lock(self, name: str) -> AbstractAsyncContextManager[None]:
        """Hold the lock ``name`` (cluster-wide on Redis); 503 when it cannot be had."""

    async def take_events(self, org_id: int, want: int) -> tuple[int, float]:
        """Take up to ``want`` of the organisation's event tokens: (granted, seconds to wait
        when none was)."""

    async def exchange_bytes(self, added: Mapping[int, int],
                             known: Collection[int] = ()) -> dict[int, int]:
        """Add ``added`` (bytes by organisation) to the totals; the totals of those
        organisations and of ``known``. Raises when the counts cannot be reached (the
        caller keeps ``added``)."""

    async def replace_bytes(self, totals: Mapping[int, int]) -> None:
        """A recount from the store replaces the totals."""

    @property
    def shared(self) -> bool:
        """Whether the totals outlive this process (on Redis)."""

    async def claim(self, name: str, seconds: float) -> bool:
        """Whether this node is the one to do ``name`` now (once per ``seconds`` in the
        cluster; always on a process of its own)."""

    async def close(self) -> None:
        """Release what this process holds."""


class MemoryQuotaCounts:
    """``QuotaCounts`` in this process."""

    def __init__(self, settings: Settings) -> None:
        self._rate = settings.quota_events_per_s_per_org
        self._locks: dict[str, asyncio.Lock] = {}
        self._buckets: dict[int, TokenBucket] = {}
        self._bytes: dict[int, int] = {}

    @property
    def mode(self) -> str:
        return "memory"

    @contextlib.asynccontextmanager
    async def lock(self, name: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            yield

    async def take_events(self, org_id: int, want: int) -> tuple[int, float]:
        bucket = self._buckets.get(org_id)
        if bucket is None:
            bucket = self._buckets[org_id] = TokenBucket(self._rate, max(1.0, self._rate))
        return bucket.take(time.monotonic(), want)

    async def exchange_bytes(self, added: Mapping[int, int],
                             known: Collection[int] = ()) -> dict[int, int]:
        for org_id, count in added.items():
            self._bytes[org_id] = self._bytes.get(org_id, 0) + count
        return {org_id: self._bytes.get(org_id, 0) for org_id in {*added, *known}}

    async def replace_bytes(self, totals: Mapping[int, int]) -> None:
        self._bytes = dict(totals)

    @property
    def shared(self) -> bool:
        return False

    async def claim(self, name: str, seconds: float) -> bool:
        return True

    async def close(self) -> None:
        return None


def create_quota_counts(settings: Settings) -> QuotaCounts:
    """``RedisQuotaCounts`` when the bus is Redis, else ``MemoryQuotaCounts``."""
    local = MemoryQuotaCounts(settings)
    if settings.bus_url.startswith(("redis://", "rediss://", "unix://")):
        from .quota_counts_redis import RedisQuotaCounts  # only where Redis is installed

        return RedisQuotaCounts(settings, local)
    return local
