"""The limits of a cluster, counted on its Redis (``RIDECAST_BUS_URL=redis://...``).

* Failed authentications: a fixed-window counter per (user name, address) pair and per
  address (``scripts.LOGIN_FAILED``), checked before any credential lookup
  (``LOGIN_WAIT``). The ingest fast path trusts a pair found clear for up to
  ``CLEAR_FOR_S``, so a throttle set through another node applies there within that time.
* Requests per key: one token bucket per key on Redis's clock (``RATE_TAKE``). A node takes
  tokens in small grants (``GRANT_S`` of the rate, at least one) and spends them locally,
  so the fast path need not wait on Redis for every request; what is left of a grant after
  ``GRANT_LIFE_S`` is dropped, which only makes the limit stricter (by at most one grant
  per node and key per ``GRANT_LIFE_S``: 1 % of the rate).
* Open streams per user and per token: a hash per user and per token, node id -> count
  (``STREAM_OPEN`` / ``STREAM_CLOSE``). Each node holds a lease (``NODE_LEASE``), renewed
  every third of ``RIDECAST_LIMITS_LEASE_S``; counts of a node whose lease ran out (it died)
  are dropped by the next ``STREAM_OPEN`` that meets them, so a dead node's streams are
  given back within the lease.

When Redis does not answer (within ``RIDECAST_BUS_TIMEOUT_S``), the node falls back to its
own counts (``MemoryLimits``, which always keeps them), logs one line, sets
``ridecast_limits_local_fallback`` and reports it in ``/readyz``; the lease renewal tries
Redis again, and once it answers the node publishes its open streams again and goes back
to the shared counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ..config import Settings
from ..metrics import LIMITS_FALLBACK
from . import scripts
from .memory import MemoryLimits

log = logging.getLogger(__name__)

CLEAR_FOR_S = 1.0
"""How long a (user, address) pair found not throttled on Redis is trusted by this node."""

GRANT_S = 0.01
"""A node takes this many seconds' worth of a key's rate from Redis at a time."""

GRANT_LIFE_S = 1.0
"""A grant's tokens not spent within this time are dropped."""

_MAX_CACHED = 100_000
_FAILURES = (RedisError, OSError, TimeoutError)


class RedisLimits:
    """``Limits`` on Redis, with ``local`` (this node's counts) as the fallback."""

    def __init__(self, settings: Settings, local: MemoryLimits) -> None:
        self._local = local
        self._settings = settings
        self._keys = scripts.Keys(settings.bus_prefix)
        self.node_id = uuid.uuid4().hex[:16]
        self._redis: Redis = Redis.from_url(
            settings.bus_url, socket_timeout=settings.bus_timeout_s,
            socket_connect_timeout=settings.bus_timeout_s,
        )
        self._login_wait = self._redis.register_script(scripts.LOGIN_WAIT)
        self._login_failed = self._redis.register_script(scripts.LOGIN_FAILED)
        self._rate_take = self._redis.register_script(scripts.RATE_TAKE)
        self._stream_open = self._redis.register_script(scripts.STREAM_OPEN)
        self._stream_close = self._redis.register_script(scripts.STREAM_CLOSE)
        self._node_lease = self._redis.register_script(scripts.NODE_LEASE)
        self._lease_ms = int(settings.limits_lease_s * 1000)
        # A stream-count key lives this long unless a node holding counts in it renews it.
        self._counts_ttl_ms = 3 * self._lease_ms
        # When Redis stopped answering (None: it answers), and why.
        self._down_since: float | None = None
        self._down_reason = ""
        # This node's stream counts on Redis may be wrong (a close was lost): publish again.
        self._dirty = True
        self._published: set[str] = set()
        self._clear: dict[tuple[str | None, str | None], float] = {}
        self._grants: dict[str, tuple[int, float]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._renewer: asyncio.Task[None] | None = None

    # ---- state ---------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        if self._down_since is None:
            return "redis"
        return f"local fallback: Redis unreachable ({self._down_reason})"

    @property
    def rate(self) -> float:
        return self._local.rate

    @property
    def _up(self) -> bool:
        return self._down_since is None

    def _fell_back(self, exc: BaseException) -> None:
        if self._down_since is None:
            log.warning("limits: Redis does not answer (%s); counting on this node only "
                        "until it does", type(exc).__name__)
            self._down_since = time.monotonic()
            self._down_reason = type(exc).__name__
            LIMITS_FALLBACK.set(1)
        self._dirty = True

    # ---- failed authentications ----------------------------------------------------------

    def _login_keys(self, user: str | None, address: str | None) -> list[str]:
        keys = []
        if user is not None:
            keys.append(self._keys.failures_of_pair(user, address))
        if address is not None:
            keys.append(self._keys.failures_of_address(address))
        return keys

    def _login_limits(self, user: str | None, address: str | None) -> list[int]:
        settings = self._settings
        found = []
        if user is not None:
            found.append(settings.auth_failures_per_user)
        if address is not None:
            found.append(settings.auth_failures_per_address)
        return found

    def login_clear_now(self, user: str | None, address: str | None) -> bool:
        if not self._up:
            return self._local.login_clear_now(user, address)
        checked = self._clear.get((user, address))
        return checked is not None and time.monotonic() - checked < CLEAR_FOR_S

    async def login_wait(self, user: str | None, address: str | None) -> float | None:
        if self._up:
            keys = self._login_keys(user, address)
            if not keys:
                return None
            try:
                wait_ms = int(await self._login_wait(
                    keys=keys, args=self._login_limits(user, address)))
            except _FAILURES as exc:
                self._fell_back(exc)
            else:
                if wait_ms > 0:
                    self._clear.pop((user, address), None)
                    return wait_ms / 1000
                if len(self._clear) >= _MAX_CACHED:
                    self._clear.clear()
                self._clear[(user, address)] = time.monotonic()
                return None
        return await self._local.login_wait(user, address)

    async def login_failed(self, user: str | None, address: str | None) -> None:
        # Counted here too: the fallback then starts from what this node saw.
        await self._local.login_failed(user, address)
        self._clear.pop((user, address), None)
        if not self._up:
            return
        keys = self._login_keys(user, address)
        if not keys:
            return
        window_ms = int(self._settings.auth_failure_window_s * 1000)
        try:
            await self._login_failed(keys=keys, args=[window_ms])
        except _FAILURES as exc:
            self._fell_back(exc)

    # ---- requests per key ----------------------------------------------------------------

    def take_now(self, key: str) -> bool:
        if self.rate <= 0:
            return True
        if not self._up:
            return self._local.take_now(key)
        grant = self._grants.get(key)
        if grant is None:
            return False
        tokens, granted_at = grant
        if tokens < 1 or time.monotonic() - granted_at > GRANT_LIFE_S:
            del self._grants[key]
            return False
        self._grants[key] = (tokens - 1, granted_at)
        return True

    async def take(self, key: str) -> float | None:
        if self.rate <= 0 or self.take_now(key):
            return None
        if self._up:
            rate, burst = self.rate, self._settings.rate_limit_burst
            want = max(1, min(int(burst), int(rate * GRANT_S)))
            try:
                granted, wait = await self._rate_take(
                    keys=[self._keys.rate(key)], args=[repr(rate), repr(burst), want])
            except _FAILURES as exc:
                self._fell_back(exc)
            else:
                granted = int(granted)
                if granted < 1:
                    return max(float(wait), 0.001)
                if granted > 1:
                    if len(self._grants) >= _MAX_CACHED:
                        self._grants.clear()
                    self._grants[key] = (granted - 1, time.monotonic())
                return None
        return await self._local.take(key)

    # ---- open streams --------------------------------------------------------------------

    def _stream_keys(self, user_id: int, token_hash: str) -> list[str]:
        return [self._keys.user_streams(user_id), self._keys.token_streams(token_hash)]

    async def open_stream(self, user_id: int, token_hash: str) -> bool:
        local = self._local
        if not local.has_room(user_id, token_hash):  # this node alone is at a limit
            return False
        if self._up:
            keys = self._stream_keys(user_id, token_hash)
            try:
                full = int(await self._stream_open(keys=keys, args=[
                    self.node_id, local.max_per_user, local.max_per_token,
                    self._keys.node_prefix, self._counts_ttl_ms]))
            except _FAILURES as exc:
                self._fell_back(exc)
            else:
                if full:
                    return False
                self._published.update(keys)
        local.count_open(user_id, token_hash)
        return True

    def close_stream(self, user_id: int, token_hash: str) -> None:
        self._local.close_stream(user_id, token_hash)
        if not self._up:
            self._dirty = True
            return
        task = asyncio.get_running_loop().create_task(
            self._close_on_redis(self._stream_keys(user_id, token_hash)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close_on_redis(self, keys: list[str]) -> None:
        try:
            await self._stream_close(keys=keys, args=[self.node_id])
        except _FAILURES as exc:
            self._fell_back(exc)
            return
        # Forget keys this node no longer counts in, so that ``_published`` stays as large
        # as the open streams, not as every token ever seen.
        self._published -= set(keys) - self._counted_keys()

    def _counted_keys(self) -> set[str]:
        """The keys in which this node counts open streams now."""
        local, keys = self._local, self._keys
        return ({keys.user_streams(user) for user in local.per_user}
                | {keys.token_streams(token) for token in local.per_token})

    async def _publish_counts(self) -> None:
        """Write this node's true stream counts over whatever Redis holds for it."""
        local, keys = self._local, self._keys
        counts = {keys.user_streams(user): n for user, n in local.per_user.items()}
        counts.update({keys.token_streams(token): n for token, n in local.per_token.items()})
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in self._published - counts.keys():
                pipe.hdel(key, self.node_id)
            for key, count in counts.items():
                pipe.hset(key, self.node_id, count)
                pipe.pexpire(key, self._counts_ttl_ms)
            await pipe.execute()
        self._published = set(counts)

    async def _keep_counts(self) -> None:
        """Renew the time to live of the keys this node counts in."""
        counted = self._counted_keys()
        if not counted:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in counted:
                pipe.pexpire(key, self._counts_ttl_ms)
            await pipe.execute()

    # ---- the node lease ------------------------------------------------------------------

    async def renew(self) -> None:
        """Renew this node's lease; republish its counts when they may be wrong; leave the
        fallback once Redis answers."""
        try:
            held = int(await self._node_lease(keys=[self._keys.node(self.node_id)],
                                              args=[self._lease_ms]))
            if self._dirty or not held or not self._up:
                await self._publish_counts()
            else:
                await self._keep_counts()
        except _FAILURES as exc:
            self._fell_back(exc)
            return
        self._dirty = False
        if self._down_since is not None:
            log.warning("limits: Redis answers again after %.1f s; counting cluster-wide",
                        time.monotonic() - self._down_since)
            self._down_since = None
            LIMITS_FALLBACK.set(0)
            self._clear.clear()
            self._grants.clear()

    async def _renew_loop(self) -> None:
        while True:
            await self.renew()
            await asyncio.sleep(self._settings.limits_lease_s / 3)

    async def start(self) -> None:
        await self.renew()
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())

    async def close(self) -> None:
        """Stop renewing; give back this node's counts and lease (best effort: if Redis
        does not answer, the lease runs out and other nodes drop them)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task
        with contextlib.suppress(*_FAILURES):
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in self._published:
                    pipe.hdel(key, self.node_id)
                pipe.delete(self._keys.node(self.node_id))
                await pipe.execute()
        await self._redis.aclose()
        LIMITS_FALLBACK.set(0)
