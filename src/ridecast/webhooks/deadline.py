"""A time-out for one task's requests, one after the other, with one timer for them all.

``asyncio.timeout`` around every request costs a timer handle (scheduled in the loop's heap
and cancelled again) and a context manager per request, a visible share of the server's CPU
when a dispatcher unit sends thousands of small deliveries (docs/performance.md). A unit
sends its requests one after the other, so one timer does: ``start`` only records when the
current request must end; the timer, armed for the earliest such moment, re-arms itself for
the current one when it fires early, and cancels the task when the current request has run
out of time. ``expired`` then
tells the caller's ``except CancelledError`` that the cancellation was this time-out, not a
shutdown.

Usage (inside the task that waits)::

    deadline = Deadline()
    try:
        for request in requests:
            deadline.start(10.0)
            try:
                await send(request)
            except asyncio.CancelledError:
                if not deadline.expired():
                    raise
                ...  # timed out
            finally:
                deadline.stop()
    finally:
        deadline.close()
"""

from __future__ import annotations

import asyncio


class Deadline:
    """One time-out at a time for the current task (see the module docstring)."""

    __slots__ = ("_fired", "_handle", "_loop", "_task", "_when")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline() must be made inside a task")
        self._task = task
        self._when: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False

    def start(self, timeout_s: float) -> None:
        """The request about to be awaited must end within ``timeout_s``."""
        when = self._loop.time() + timeout_s
        self._when = when
        self._fired = False
        handle = self._handle
        if handle is None or handle.when() > when:
            if handle is not None:
                handle.cancel()
            self._handle = self._loop.call_at(when, self._fire)

    def stop(self) -> None:
        """The request ended (the timer stays armed for the next one)."""
        self._when = None

    def expired(self) -> bool:
        """Whether the ``CancelledError`` being handled is this time-out's alone (True), or
        also someone else's (a shutdown: False, let it through). Call it once, in the
        handler of the ``CancelledError``."""
        if not self._fired:
            return False
        self._fired = False
        return self._task.uncancel() == 0

    def close(self) -> None:
        """Drop the timer (the task is done with its requests)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._when = None

    def _fire(self) -> None:
        self._handle = None
        when = self._when
        if when is None:
            return  # idle between requests: the next ``start`` arms a timer again
        if self._loop.time() < when:
            self._handle = self._loop.call_at(when, self._fire)
            return
        self._when = None
        self._fired = True
        self._task.cancel()


__all__ = ["Deadline"]
