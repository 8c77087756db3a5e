"""The serving process's share of work for runs at ``speed: "max"``: one lane, a duty cycle.

A run's engine computes elsewhere (``engine_pool.py``), but its events are published here:
stamped, serialised, stored and fanned out on the event loop that answers every request and
stream. A run at 'max' has events as fast as they can be taken, so without a bound its
publishing alone would fill the loop. Such runs publish through one ``PublishLane``: one
batch at a time, in arrival order (so runs take turns, whichever organisation they belong
to), and after a batch that took ``t`` seconds the lane stays closed for ``t * (1 - share) /
share``: together they use at most about ``share`` of the process's time, and the rest is
left to requests, streams and real-time runs (which never wait for the lane).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class PublishLane:
    """One publishing batch of the runs at 'max' at a time, at most ``share`` of the time."""

    def __init__(self, share: float) -> None:
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self.share = share
        self._lock = asyncio.Lock()  # FIFO: runs waiting take turns
        self._open_at = 0.0

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        async with self._lock:
            wait = self._open_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            started = time.monotonic()
            try:
                yield
            finally:
                took = time.monotonic() - started
                self._open_at = time.monotonic() + took * (1 - self.share) / self.share
