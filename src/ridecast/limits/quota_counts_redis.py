"""``QuotaCounts`` on the cluster's Redis, and on this node's own counts while Redis does
not answer (``quota_counts.py``). A module of its own so that the embedded default, which
installs no Redis client, never imports one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Collection, Mapping

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ..config import Settings
from ..errors import ServiceUnavailable
from . import scripts
from .quota_counts import LOCK_HOLD_S, LOCK_WAIT_S, RETRY_S, MemoryQuotaCounts

log = logging.getLogger(__name__)

_FAILURES = (RedisError, OSError, TimeoutError)


class RedisQuotaCounts:
    """``QuotaCounts`` on the cluster's Redis; ``local``'s while Redis does not answer."""

    def __init__(self, settings: Settings, local: MemoryQuotaCounts) -> None:
        self._local = local
        self._keys = scripts.Keys(settings.bus_prefix)
        self._rate = settings.quota_events_per_s_per_org
        self._redis: Redis = Redis.from_url(
            settings.bus_url, socket_timeout=settings.bus_timeout_s,
            socket_connect_timeout=settings.bus_timeout_s)
        self._rate_take = self._redis.register_script(scripts.RATE_TAKE)
        self._unlock = self._redis.register_script(scripts.UNLOCK)
        self._down_since: float | None = None
        self._retry_at = 0.0

    @property
    def mode(self) -> str:
        return "redis" if self._down_since is None else "local fallback"

    @property
    def _try(self) -> bool:
        """Whether to ask Redis now (it answers, or it is time to try it again)."""
        return self._down_since is None or time.monotonic() >= self._retry_at

    def _fell_back(self, exc: BaseException) -> None:
        self._retry_at = time.monotonic() + RETRY_S
        if self._down_since is None:
            log.warning("quotas: Redis does not answer (%s); counting on this node only "
                        "until it does", type(exc).__name__)
            self._down_since = time.monotonic()

    def _answered(self) -> None:
        if self._down_since is not None:
            log.warning("quotas: Redis answers again; counting cluster-wide")
            self._down_since = None

    @contextlib.asynccontextmanager
    async def lock(self, name: str) -> AsyncIterator[None]:
        if not self._try:
            async with self._local.lock(name):
                yield
            return
        key, token = self._keys.quota_lock(name), uuid.uuid4().hex
        deadline = time.monotonic() + LOCK_WAIT_S
        pause = 0.005
        while True:
            try:
                taken = await self._redis.set(key, token, nx=True,
                                              px=int(LOCK_HOLD_S * 1000))
            except _FAILURES as exc:
                self._fell_back(exc)
                async with self._local.lock(name):
                    yield
                return
            self._answered()
            if taken:
                break
            if time.monotonic() >= deadline:
                raise ServiceUnavailable("another request of your organisation is counting "
                                         "its quota; retry shortly", retry_after=1)
            await asyncio.sleep(pause)
            pause = min(0.1, pause * 2)
        try:
            yield
        finally:
            with contextlib.suppress(*_FAILURES):  # else it runs out after LOCK_HOLD_S
                await self._unlock(keys=[key], args=[token])

    async def take_events(self, org_id: int, want: int) -> tuple[int, float]:
        if not self._try:
            return await self._local.take_events(org_id, want)
        burst = max(1.0, self._rate)
        try:
            granted, wait = await self._rate_take(
                keys=[self._keys.quota_events(org_id)],
                args=[repr(self._rate), repr(burst), max(1, want)])
        except _FAILURES as exc:
            self._fell_back(exc)
            return await self._local.take_events(org_id, want)
        self._answered()
        granted = int(granted)
        return granted, (max(float(wait), 0.001) if granted < 1 else 0.0)

    async def exchange_bytes(self, added: Mapping[int, int],
                             known: Collection[int] = ()) -> dict[int, int]:
        orgs = [*added, *(org_id for org_id in known if org_id not in added)]
        if not orgs:
            return {}
        if not self._try:
            raise ServiceUnavailable("Redis does not answer", retry_after=1)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for org_id in orgs:
                    if org_id in added:
                        pipe.incrby(self._keys.quota_bytes(org_id), added[org_id])
                    else:
                        pipe.get(self._keys.quota_bytes(org_id))
                totals = await pipe.execute()
        except _FAILURES as exc:
            self._fell_back(exc)  # logged once there; the caller keeps ``added``
            raise ServiceUnavailable("Redis does not answer", retry_after=1) from exc
        self._answered()
        return {org_id: int(total or 0) for org_id, total in zip(orgs, totals, strict=True)}

    async def replace_bytes(self, totals: Mapping[int, int]) -> None:
        if not self._try:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for org_id, total in totals.items():
                    pipe.set(self._keys.quota_bytes(org_id), total)
                await pipe.execute()
        except _FAILURES as exc:
            self._fell_back(exc)
            return
        self._answered()

    @property
    def shared(self) -> bool:
        return True

    async def claim(self, name: str, seconds: float) -> bool:
        if not self._try:
            return True
        try:
            taken = await self._redis.set(self._keys.quota_lock(name), "1", nx=True,
                                          px=max(1, int(seconds * 1000)))
        except _FAILURES as exc:
            self._fell_back(exc)
            return True  # alone until Redis answers: do it here
        self._answered()
        return bool(taken)

    async def close(self) -> None:
        await self._redis.aclose()
