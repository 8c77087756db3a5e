"""Throttling of failed authentication (pure: the caller passes the clock).

Guessing keys is hopeless (they are 256-bit random), but every failed attempt costs a
hash and a store lookup, and a flood of them slowed healthy clients. So failures are
counted in fixed windows per (user name, client address) pair and per client address, as
OWASP's authentication guidance suggests, never per user name alone: once a pair or an
address has failed its limit in a window, its next attempts are answered 429 with
``Retry-After`` before any lookup, until the window ends. A stranger guessing a user's key
from elsewhere therefore throttles only their own address and pair: the user's correct
key, from any other address, is never refused because of someone else's failures.

These are the rules of one process (``limits/memory.py``); ``limits/redis.py`` applies the
same rules to counts kept on Redis for a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FailureThrottle:
    """Failure counts per key (a user name or an address) in fixed windows."""

    max_failures: int
    window_s: float
    max_keys: int = 100_000
    _windows: dict[str, tuple[float, int]] = field(default_factory=dict)

    def retry_after(self, key: str, now: float) -> float | None:
        """Seconds until ``key`` may try again, or None when it is not throttled."""
        window = self._windows.get(key)
        if window is None:
            return None
        started, failures = window
        if now - started >= self.window_s:
            del self._windows[key]
            return None
        if failures < self.max_failures:
            return None
        return self.window_s - (now - started)

    def record_failure(self, key: str, now: float) -> None:
        """Count one failed attempt of ``key``."""
        started, failures = self._windows.get(key, (now, 0))
        if now - started >= self.window_s:
            started, failures = now, 0
        if key not in self._windows and len(self._windows) >= self.max_keys:
            self._evict(now)
        self._windows[key] = (started, failures + 1)

    def _evict(self, now: float) -> None:
        # Bounded memory under a flood of distinct names: drop finished windows, and if
        # that is not enough, forget everything (failing open for a window, never closed).
        for key in [k for k, (started, _) in self._windows.items()
                    if now - started >= self.window_s]:
            del self._windows[key]
        if len(self._windows) >= self.max_keys:
            self._windows.clear()


def pair_key(user: str, address: str | None) -> str:
    """The key of a (user name, address) pair (NUL cannot occur in either)."""
    return f"{user}\x00{address or ''}"


@dataclass
class LoginThrottle:
    """The two throttles of a process: by (user name, address) pair and by address."""

    by_pair: FailureThrottle
    by_address: FailureThrottle

    def retry_after(self, user: str | None, address: str | None, now: float) -> float | None:
        """Seconds to wait if the pair or the address is throttled, else None."""
        waits = []
        if user is not None:
            waits.append(self.by_pair.retry_after(pair_key(user, address), now))
        if address is not None:
            waits.append(self.by_address.retry_after(address, now))
        found = [wait for wait in waits if wait is not None]
        return max(found) if found else None

    def failed(self, user: str | None, address: str | None, now: float) -> None:
        """Count a failed authentication of ``user`` from ``address``."""
        if user is not None:
            self.by_pair.record_failure(pair_key(user, address), now)
        if address is not None:
            self.by_address.record_failure(address, now)


@dataclass
class RateLimiter:
    """Requests per second per key (a token bucket each), bounded in memory.

    Each key may send ``rate`` requests a second on average and ``burst`` at once; the
    request after that waits ``retry_after`` seconds. ``rate`` 0 turns limiting off.
    """

    rate: float
    burst: float
    max_keys: int = 100_000
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def take(self, key: str, now: float) -> float | None:
        """Spend one request of ``key``: None when allowed, else seconds to wait."""
        if self.rate <= 0:
            return None
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate
        if key not in self._buckets and len(self._buckets) >= self.max_keys:
            self._buckets.clear()  # a full bucket is the default: forgetting only forgives
        self._buckets[key] = (tokens - 1, now)
        return None
