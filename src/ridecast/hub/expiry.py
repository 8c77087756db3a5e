"""Token expiry for every open stream, with one timer for the whole hub.

A ``loop.call_at`` handle per stream would keep a timer object per stream alive; here streams
sit in one heap of ``(when, seq, weak reference)`` and a single timer is armed for the
earliest. A stream that closes first is skipped when its time comes (its weak reference is
dead or it says ``closed``); the heap is rebuilt when such leftovers outnumber the live
entries, so churn does not grow it.
"""

from __future__ import annotations

import asyncio
import heapq
import weakref
from collections.abc import Callable
from typing import Protocol


class Expiring(Protocol):
    """What the heap needs of a stream."""

    @property
    def closed(self) -> bool: ...

    def abort(self, code: str, message: str | None = None) -> None: ...


_Entry = tuple[float, int, "weakref.ref[Expiring]"]


class ExpiryHeap:
    """Closes each added stream with ``token_expired`` at its loop time."""

    __slots__ = ("_heap", "_live", "_seq", "_timer", "_when")

    def __init__(self, live: Callable[[], int]) -> None:
        self._heap: list[_Entry] = []
        self._live = live  # how many streams are open: bounds the dead entries kept
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._when = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, when: float, stream: Expiring) -> None:
        """Close ``stream`` at loop time ``when`` unless it closed before."""
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, weakref.ref(stream)))
        if len(self._heap) > 2 * self._live() + 64:
            self._compact()
        if self._timer is None or when < self._when:
            self._arm()

    def _compact(self) -> None:
        kept = []
        for entry in self._heap:
            stream = entry[2]()
            if stream is not None and not stream.closed:
                kept.append(entry)
        heapq.heapify(kept)
        self._heap = kept

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._heap:
            self._when = self._heap[0][0]
            self._timer = asyncio.get_running_loop().call_at(self._when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        now = asyncio.get_running_loop().time()
        while heap and heap[0][0] <= now:
            stream = heapq.heappop(heap)[2]()
            if stream is not None and not stream.closed:
                stream.abort("token_expired")
        self._arm()

    def stop(self) -> None:
        """Cancel the timer (the hub is closing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
