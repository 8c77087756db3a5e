"""The limits a client meets: failed authentications, requests per key, open streams.

``Limits`` is the one port through which the HTTP API and the websocket hub consult them.
Two implementations hold the counts:

* ``MemoryLimits`` (``memory.py``): in this process, for the embedded default
  (``RIDECAST_BUS_URL=memory://``), where one process is the whole service;
* ``RedisLimits`` (``redis.py``): on the cluster's Redis, so that N nodes enforce the
  limits of one process (Lua scripts, each one atomic; stream counts per node under an
  expiring node lease, so a node that dies gives its streams back). A node that cannot
  reach Redis falls back to its own counts until Redis answers again, and says so in
  ``/readyz`` (``limits``) and ``/metrics`` (``ridecast_limits_local_fallback``).

The synchronous ``*_now`` methods serve the ingest fast path, which never awaits: they
answer from what this process knows, and a ``False`` sends the request on the full path,
which asks the shared counts.
"""

from __future__ import annotations

from typing import Protocol

from ..config import Settings


class Limits(Protocol):
    """Failed-authentication throttle, per-key request rate and open-stream counts."""

    @property
    def mode(self) -> str:
        """``memory``, ``redis``, or ``local fallback: ...`` when Redis does not answer."""

    @property
    def rate(self) -> float:
        """Requests per second per key (``RIDECAST_RATE_LIMIT_PER_KEY``; 0: no limit)."""

    def login_clear_now(self, user: str | None, address: str | None) -> bool:
        """True when neither the (user, address) pair nor the address is known to be
        throttled; False when it is, or when only the shared counts can tell."""

    async def login_wait(self, user: str | None, address: str | None) -> float | None:
        """Seconds the pair or the address must wait (429), or None."""

    async def login_failed(self, user: str | None, address: str | None) -> None:
        """Count one failed authentication of ``user`` (None: not a Basic credential)
        from ``address``."""

    def take_now(self, key: str) -> bool:
        """Spend one request of ``key`` from what this process holds; False when it
        holds none (ask ``take``)."""

    async def take(self, key: str) -> float | None:
        """Spend one request of ``key``: None when allowed, else seconds to wait."""

    async def open_stream(self, user_id: int, token_hash: str) -> bool:
        """Count a new stream of the user and token, or False when either is at its limit."""

    def close_stream(self, user_id: int, token_hash: str) -> None:
        """A counted stream ended (never waits; the shared count follows shortly)."""

    async def start(self) -> None:
        """Start what keeps the counts alive (the node lease on Redis)."""

    async def close(self) -> None:
        """Give back this process's counts and stop."""


def create_limits(settings: Settings) -> Limits:
    """``RedisLimits`` when the bus is Redis, else ``MemoryLimits``."""
    from .memory import MemoryLimits

    if settings.bus_url.startswith(("redis://", "rediss://", "unix://")):
        from .redis import RedisLimits

        return RedisLimits(settings, MemoryLimits(settings))
    return MemoryLimits(settings)


__all__ = ["Limits", "create_limits"]
