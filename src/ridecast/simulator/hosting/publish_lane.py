"""The serving process's share of work for runs at ``speed: "max"``: one lane, a duty cycle.

A run's engine computes elsewhere (``engine_pool.py``), but its events are published here:
stamped, serialised, stored and fanned out on the event loop that answers every request and
stream. A run at 'max' has events as fast as they can be taken, so without a bound its
publishing alone would fill the loop. Such runs publish through one ``PublishLane``: one
batch at a time, in fair turns by organisation (each batch's time is charged to its
organisation, and the organisation charged least goes next: ``slices.FairTurns``; its runs
in arrival order), so an organisation with five runs gets the share of one with a single
run. After a batch that took ``t`` seconds the lane stays closed for ``t * (1 - share) /
share``: together they use at most about ``share`` of the process's time, and the rest is
left to requests, streams and real-time runs (which never wait for the lane).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from .slices import FairTurns


class PublishLane:
    """One publishing batch of the runs at 'max' at a time, at most ``share`` of the time,
    in fair turns by group (an organisation), then by run within it."""

    def __init__(self, share: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        self.share = share
        self._clock = clock  # what a batch is charged by (injectable for tests)
        self._busy = False
        self._waiting: FairTurns[asyncio.Future[None]] = FairTurns()
        self._open_at = 0.0

    async def _acquire(self, group: str) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Through the turns even when the lane is free: a group that was idle starts again
        # from the turns' clock, not from the credit it had before.
        self._waiting.push(group, future)
        if not self._busy:
            self._busy = True
            self._release()  # hands the lane to the one waiting: this one
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # the turn came as we were cancelled: pass it on
            else:
                self._waiting.remove(group, future)
            raise

    def _release(self) -> None:
        while self._waiting:
            _, future = self._waiting.pop()
            if not future.done():
                future.set_result(None)  # the lane stays busy: it is this one's
                return
        self._busy = False

    @asynccontextmanager
    async def turn(self, group: str = "") -> AsyncIterator[None]:
        await self._acquire(group)
        try:
            wait = self._open_at - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            started = self._clock()
            try:
                yield
            finally:
                took = self._clock() - started
                self._waiting.charge(group, took)
                self._open_at = self._clock() + took * (1 - self.share) / self.share
        finally:
            self._release()
