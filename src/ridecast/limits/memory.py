"""The limits of one process, counted in its memory (the embedded default).

Also the fallback of ``RedisLimits`` while Redis does not answer: the same rules on this
node's own counts.
"""

from __future__ import annotations

import time
from collections import Counter

from ..auth.throttle import FailureThrottle, LoginThrottle, RateLimiter
from ..config import Settings


class MemoryLimits:
    """``Limits`` on this process's counts (``auth/throttle.py`` holds the rules)."""

    def __init__(self, settings: Settings) -> None:
        self.login = LoginThrottle(
            FailureThrottle(settings.auth_failures_per_user, settings.auth_failure_window_s),
            FailureThrottle(settings.auth_failures_per_address, settings.auth_failure_window_s),
        )
        self.key_rate = RateLimiter(settings.rate_limit_per_key, settings.rate_limit_burst)
        self.max_per_user = settings.ws_max_streams_per_user
        self.max_per_token = settings.ws_max_streams_per_token
        # Open streams of this process: the truth a Redis node republishes from.
        self.per_user: Counter[int] = Counter()
        self.per_token: Counter[str] = Counter()

    @property
    def mode(self) -> str:
        return "memory"

    @property
    def rate(self) -> float:
        return self.key_rate.rate

    def login_clear_now(self, user: str | None, address: str | None) -> bool:
        return self.login.retry_after(user, address, time.monotonic()) is None

    async def login_wait(self, user: str | None, address: str | None) -> float | None:
        return self.login.retry_after(user, address, time.monotonic())

    async def login_failed(self, user: str | None, address: str | None) -> None:
        self.login.failed(user, address, time.monotonic())

    def take_now(self, key: str) -> bool:
        return self.key_rate.take(key, time.monotonic()) is None

    async def take(self, key: str) -> float | None:
        return self.key_rate.take(key, time.monotonic())

    def has_room(self, user_id: int, token_hash: str) -> bool:
        """Whether this process's counts leave room for one more stream."""
        return (self.per_user[user_id] < self.max_per_user
                and self.per_token[token_hash] < self.max_per_token)

    def count_open(self, user_id: int, token_hash: str) -> None:
        self.per_user[user_id] += 1
        self.per_token[token_hash] += 1

    async def open_stream(self, user_id: int, token_hash: str) -> bool:
        if not self.has_room(user_id, token_hash):
            return False
        self.count_open(user_id, token_hash)
        return True

    def close_stream(self, user_id: int, token_hash: str) -> None:
        _decrement(self.per_user, user_id)
        _decrement(self.per_token, token_hash)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def _decrement(counter: Counter[int] | Counter[str], key: int | str) -> None:
    counter[key] -= 1  # type: ignore[index]
    if counter[key] <= 0:  # type: ignore[index]
        del counter[key]
