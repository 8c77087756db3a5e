"""The one-timer time-out of a unit's requests (webhooks/deadline.py).

The tests run on an event loop whose clock jumps to the next timer whenever nothing else is
ready: whether a request ends before its time-out is decided by the order of their
deadlines, never by how busy the machine is (on a real clock, a loop held up past both
moments runs the time-out first)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from ridecast.webhooks.deadline import Deadline


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock that only moves to the next scheduled timer."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        ready: Any = self._ready  # type: ignore[attr-defined]
        scheduled: Any = self._scheduled  # type: ignore[attr-defined]
        if not ready and scheduled:
            self._now = max(self._now, scheduled[0].when())
        super()._run_once()  # type: ignore[misc]


def on_virtual_time(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run the coroutine test ``test`` on a ``VirtualTimeLoop`` of its own."""

    def run() -> None:
        loop = VirtualTimeLoop()
        try:
            loop.run_until_complete(test())
        finally:
            loop.close()

    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run


async def _request(deadline: Deadline, seconds: float, timeout_s: float) -> str:
    deadline.start(timeout_s)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if not deadline.expired():
            raise
        return "timeout"
    finally:
        deadline.stop()
    return "ok"


@on_virtual_time
async def test_requests_in_time_and_one_too_slow_then_in_time_again() -> None:
    """A slow request times out; the task goes on, and later requests are not cut short."""
    deadline = Deadline()
    try:
        outcomes = [await _request(deadline, s, 0.2) for s in (0.01, 0.5, 0.01, 0.15, 0.15)]
    finally:
        deadline.close()
    assert outcomes == ["ok", "timeout", "ok", "ok", "ok"]
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


@on_virtual_time
async def test_a_longer_time_out_after_a_shorter_one_is_honoured() -> None:
    """The timer armed for an earlier, shorter request re-arms for the current one."""
    deadline = Deadline()
    try:
        assert await _request(deadline, 0.01, 0.05) == "ok"
        assert await _request(deadline, 0.2, 1.0) == "ok"  # past the first timer's moment
        assert await _request(deadline, 0.3, 0.1) == "timeout"
    finally:
        deadline.close()


@on_virtual_time
async def test_cancellation_from_outside_is_not_taken_for_a_time_out() -> None:
    """A shutdown (the task cancelled) propagates, even while a request is timed."""

    async def unit() -> str:
        deadline = Deadline()
        try:
            return await _request(deadline, 5.0, 2.0)
        finally:
            deadline.close()

    task = asyncio.create_task(unit())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@on_virtual_time
async def test_idle_between_requests_never_cancels() -> None:
    """The timer firing while no request runs does nothing."""
    deadline = Deadline()
    try:
        assert await _request(deadline, 0.0, 0.05) == "ok"
        await asyncio.sleep(0.15)  # the timer fires here, idle
        assert await _request(deadline, 0.01, 0.05) == "ok"
    finally:
        deadline.close()
