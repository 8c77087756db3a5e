"""One open stream: its bounded send queue, its replay buffer and how it is closed.

A ``Stream`` never blocks the publisher. ``deliver`` is synchronous: when nothing is queued
and the socket can take data, the frame is written at once (the same path as
``websockets.broadcast``); otherwise it is queued and a short-lived writer task drains the
queue as the socket allows. A queue that reaches its limit closes the stream with 4100
(``slow_consumer``): nothing is dropped silently, and the client resumes with
``since=<last event_id>``.

The transport under a stream is a ``Sink``: the dedicated ``websockets`` listener
(``listener.py``) or the ASGI websocket of the main HTTP port (``asgi.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from ..auth.visibility import Principal
from ..bus import StoredEvent
from ..errors import ERRORS
from ..metrics import WS_CLOSED
from .paths import Route

log = logging.getLogger(__name__)

_FLUSH_FRAMES = 64

# A close reason is at most 123 bytes on the wire (RFC 6455 section 5.5).
_MAX_REASON = 123


class Sink(Protocol):
    """A websocket as a stream writes to it."""

    def writable(self) -> bool:
        """Whether ``write`` can take a frame now without growing an unbounded buffer."""

    def write(self, frame: bytes) -> None:
        """Add one TEXT frame to the outgoing data (only when ``writable()``)."""

    def flush(self) -> None:
        """Hand the frames added by ``write`` to the socket, in one write."""

    async def send(self, frame: bytes) -> None:
        """Write one TEXT frame, waiting for the socket to take it."""

    @property
    def can_wait(self) -> bool:
        """Whether ``wait_writable`` is supported (else queued frames go through ``send``)."""

    async def wait_writable(self) -> None:
        """Wait until ``writable()``; raises once the connection is closed."""

    async def close(self, code: int, reason: str) -> None:
        """Send a close frame with ``code`` and ``reason`` and end the connection."""

    async def wait_closed(self) -> None:
        """Read (and ignore) what the client sends until the connection ends."""


def close_reason(code: str, message: str | None = None) -> tuple[int, str]:
    """Close code and reason for an error code of the shared table."""
    spec = ERRORS[code]
    reason = f"{code}: {message or spec.description}"
    data = reason.encode()
    if len(data) > _MAX_REASON:
        reason = data[: _MAX_REASON - 3].decode(errors="ignore") + "..."
    return spec.ws_close_code or 1011, reason


class Stream:
    """An authorised subscription on one socket."""

    __slots__ = (
        "__weakref__", "_backlog", "_batch", "_closed", "_dirty", "_on_close", "_pending",
        "_queue", "_sending", "_timer", "_writer", "closing", "overflowed", "principal",
        "queue_limit", "route", "sent", "sink",
    )

    def __init__(
        self,
        sink: Sink,
        principal: Principal,
        route: Route,
        *,
        queue_limit: int,
        on_close: Callable[[Stream], None],
    ) -> None:
        self.sink = sink
        self.principal = principal
        self.route = route
        self.queue_limit = queue_limit
        self.sent = 0
        self.overflowed = False
        self._on_close = on_close
        self._queue: deque[bytes] = deque()
        self._pending: list[StoredEvent] | None = None
        self._sending = False
        self._dirty = False
        self._batch = 0
        self._backlog = 0
        self._closed = False
        self._writer: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.closing: asyncio.Task[None] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def queued(self) -> int:
        return len(self._queue)

    # ---- live delivery (synchronous, called from the bus handler) ---------------------

    def deliver(self, event: StoredEvent, dirty: list[Stream], batch: int) -> None:
        """Send or queue ``event``; never waits.

        A frame written directly is only buffered: the stream joins ``dirty`` and the hub
        flushes it once per bus batch, so a batch of k events costs one socket write per
        stream, not k. ``batch`` numbers the bus batch (see ``_push``).
        """
        if self._closed:
            return
        pending = self._pending
        if pending is not None:
            # Replaying: hold live events until the replay has caught up. A full buffer is
            # dropped rather than fatal, since every one of its events is in the log and
            # the replay reads the log again (see ``Hub._replay``).
            if len(pending) >= self.queue_limit:
                pending.clear()
                self.overflowed = True
            pending.append(event)
            return
        self._push(event.frame, dirty, batch)

    def _push(self, frame: bytes, dirty: list[Stream] | None, batch: int) -> None:
        if not self._queue and not self._sending and self.sink.writable():
            try:
                self.sink.write(frame)
                if dirty is None:
                    self.sink.flush()
                elif not self._dirty:
                    self._dirty = True
                    dirty.append(self)
            except Exception:  # the socket went away under us; its reader will notice
                self.abort("internal_error", "write failed")
                return
            self.sent += 1
            return
        if batch != self._batch:
            self._batch = batch
            self._backlog = len(self._queue)
        if self._sending and self._backlog >= self.queue_limit:
            # Slow means: a new batch finds queue_limit frames still waiting while the
            # socket refuses data (the writer is parked). One batch (at most
            # RIDECAST_GROUP_COMMIT_MAX_EVENTS frames) is always accepted whole, so a
            # healthy client is never cut off by a burst.
            self.abort("slow_consumer")
            return
        self._queue.append(frame)
        if self._writer is None:
            # A writer task exists only while there is a backlog, so that 10,000 idle
            # streams cost no task each.
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    def flush(self) -> None:
        """Write what ``deliver`` buffered (called by the hub after each bus batch)."""
        self._dirty = False
        if self._closed:
            return
        try:
            self.sink.flush()
        except Exception:
            self.abort("internal_error", "write failed")

    async def _drain(self) -> None:
        queue, sink = self._queue, self.sink
        try:
            while queue and not self._closed:
                if sink.writable():
                    # Up to a few dozen frames per socket write; ``writable`` is looked at
                    # again after each write, when the transport may have paused.
                    count = min(len(queue), _FLUSH_FRAMES)
                    for _ in range(count):
                        sink.write(queue.popleft())
                    self.sent += count
                    sink.flush()
                    continue
                self._sending = True
                try:
                    if sink.can_wait:
                        # Wait for the socket, then write the backlog in a few large
                        # writes rather than one frame at a time.
                        await sink.wait_writable()
                    else:
                        await sink.send(queue.popleft())
                        self.sent += 1
                finally:
                    self._sending = False
        except Exception:
            if not self._closed:
                self._closed = True
                self._on_close(self)
        finally:
            self._writer = None

    # ---- replay (called from the stream's own task) -----------------------------------

    def begin_replay(self) -> None:
        """Hold live events from now on, until ``go_live``."""
        self._pending = []

    def take_overflow(self) -> bool:
        """Whether live events were dropped from the hold since the last call."""
        overflowed, self.overflowed = self.overflowed, False
        return overflowed

    async def send_replayed(self, frame: bytes) -> None:
        """Send one replayed frame, waiting for the socket (replay follows the client's pace)."""
        if self.sink.writable():
            self.sink.write(frame)
            self.sink.flush()
        else:
            await self.sink.send(frame)
        self.sent += 1

    def go_live(self, last_replayed: int) -> None:
        """Release held live events after ``last_replayed`` and deliver live from now on.

        Synchronous, so no live event can slip in between the held ones and the next.
        """
        pending, self._pending = self._pending or [], None
        for event in pending:
            if event.event_id > last_replayed and not self._closed:
                self._push(event.frame, None, -1)

    # ---- closing -----------------------------------------------------------------------

    def expire_at(self, when: float) -> None:
        """Close the stream with ``token_expired`` at loop time ``when``."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(when, self.abort, "token_expired")

    def abort(self, code: str, message: str | None = None) -> None:
        """Close with the table's close code for ``code``; safe to call from sync code."""
        if self._closed:
            return
        self._closed = True
        self._queue.clear()
        self._pending = None
        if self._timer is not None:
            self._timer.cancel()
        WS_CLOSED.labels(code).inc()
        ws_code, reason = close_reason(code, message)
        loop = asyncio.get_running_loop()
        # Leave the index on the next loop turn: abort may run while the hub iterates the
        # very bucket this stream sits in (``closed`` already stops deliveries).
        loop.call_soon(self._on_close, self)
        self.closing = loop.create_task(self._close(ws_code, reason))

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.sink.close(code, reason)

    def detach(self) -> None:
        """The connection ended on its own: stop timers and writes."""
        if self._timer is not None:
            self._timer.cancel()
        if not self._closed:
            self._closed = True
            self._queue.clear()
            self._pending = None
            self._on_close(self)
        if self._writer is not None:
            self._writer.cancel()
