"""Clocks that pace a simulation: real time, k times real time, or as fast as possible.

A clock answers two questions for the runner: how far may the engine advance now
(``target``), and how long to wait for the next timer (``wait``). ``WallClock`` maps wall time
to simulated time by a factor (1 = real time: ``current_sim_ts`` is now) and stops while
paused; ``MaxClock`` never waits and lets the engine advance in fixed steps so that the event
loop (ingest, websockets, operations) keeps running between steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Protocol

MAX_SLEEP_S = 0.5
"""Longest single wait: the runner re-reads the clock at least this often."""


class Clock(Protocol):
    """Paces a runner; see the module docstring."""

    def target(self, engine_now: float) -> float:
        """Simulated time the engine may advance to now."""
        ...

    def op_time(self, engine_now: float) -> float:
        """Simulated time at which an operation arriving now takes effect."""
        ...

    async def wait(self, engine_now: float, next_t: float | None) -> None:
        """Return when ``next_t`` is due, or earlier when woken."""
        ...

    def wake(self) -> None:
        """Cut the current wait short (a new timer, a pause, a stop)."""
        ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class WallClock:
    """Simulated time = ``at`` + (unpaused wall time since start) x ``factor``."""

    def __init__(self, factor: float, monotonic: Callable[[], float] = time.monotonic,
                 at: float = 0.0) -> None:
        self.factor = factor
        self._mono = monotonic
        # A run taken over starts at the simulated time its clock had reached (``at``).
        self._origin = monotonic() - at / factor
        self._paused_at: float | None = None
        self._wake = asyncio.Event()

    def _elapsed(self) -> float:
        now = self._paused_at if self._paused_at is not None else self._mono()
        return (now - self._origin) * self.factor

    def target(self, engine_now: float) -> float:
        return max(engine_now, self._elapsed())

    def op_time(self, engine_now: float) -> float:
        return self.target(engine_now)

    async def wait(self, engine_now: float, next_t: float | None) -> None:
        if self._paused_at is not None or next_t is None:
            delay = MAX_SLEEP_S
        else:
            delay = min(MAX_SLEEP_S, max(0.0, (next_t - self._elapsed()) / self.factor))
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay)

    def wake(self) -> None:
        self._wake.set()

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = self._mono()
        self.wake()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._origin += self._mono() - self._paused_at
            self._paused_at = None
        self.wake()


class MaxClock:
    """As fast as possible, in steps of ``step_s`` simulated seconds."""

    def __init__(self, step_s: float = 60.0) -> None:
        self.step_s = step_s
        self._paused = False
        self._wake = asyncio.Event()

    def target(self, engine_now: float) -> float:
        return engine_now if self._paused else engine_now + self.step_s

    def op_time(self, engine_now: float) -> float:
        return engine_now

    async def wait(self, engine_now: float, next_t: float | None) -> None:
        if self._paused:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), MAX_SLEEP_S)
        else:
            await asyncio.sleep(0)  # let ingest, sockets and operations run between steps

    def wake(self) -> None:
        self._wake.set()

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self.wake()


def clock_for(speed: float | None, at: float = 0.0) -> Clock:
    """The clock for a settings' ``realtime_factor`` (None = 'max'), reading ``at``
    simulated seconds now."""
    return MaxClock() if speed is None else WallClock(speed, at=at)
