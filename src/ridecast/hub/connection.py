"""One open stream: its bounded send queue, its replay buffer and how it is closed.

A ``Stream`` never blocks the publisher. ``take`` is synchronous: when nothing is queued
and the socket can take data, the frames of a bus batch are written at once, in one write;
otherwise they are queued and a short-lived writer task drains the queue as the socket
allows. A queue that reaches its limit, in frames (``RIDECAST_WS_SEND_QUEUE``) or in bytes
(``RIDECAST_WS_SEND_QUEUE_BYTES``), closes the stream with 4100 (``slow_consumer``):
nothing is dropped silently, and the client resumes with ``since=<last event_id>``. A
closed stream lets go of its queue at once, not when its connection finally ends.

The transport under a stream is a ``Sink``: ``StreamProtocol`` (``protocol.py``) on both
ports, or an ASGI websocket under another server (``asgi.py``).
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
from .frames import text_frame, text_frames
from .paths import Route

log = logging.getLogger(__name__)

_FLUSH_BYTES = 256 * 1024
"""A backlog is written in joined chunks of about this size (``writable`` is looked at
again after each, when the transport may have paused)."""

_SLOW_REASON = "the send queue is full (RIDECAST_WS_SEND_QUEUE frames or _BYTES)"

# A close reason is at most 123 bytes on the wire (RFC 6455 section 5.5).
_MAX_REASON = 123


class Sink(Protocol):
    """A websocket as a stream writes to it.

    A ``raw`` sink takes encoded websocket frames (``frames.text_frame``), several joined
    in one ``write_raw``; any other sink takes one frame payload at a time through ``send``.
    """

    @property
    def raw(self) -> bool:
        """Whether ``write_raw`` is supported (else every frame goes through ``send``)."""

    def writable(self) -> bool:
        """Whether ``write_raw`` can take data now without growing an unbounded buffer."""

    def write_raw(self, data: bytes) -> None:
        """Hand encoded frames to the socket, in one write (only when ``writable()``)."""

    async def send(self, frame: bytes) -> None:
        """Write one TEXT frame with payload ``frame``, waiting for the socket to take it."""

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
    """An authorised subscription on one socket.

    Idle, it holds no queue, no task and no timer: the send queue exists only while the
    socket refuses data, the writer task only while there is a backlog, and token expiry
    and keepalive are hub-wide (``expiry.py``, ``keepalive.py``).
    """

    __slots__ = (
        "__weakref__", "_backlog", "_backlog_bytes", "_batch", "_closed", "_floor",
        "_on_close", "_pending", "_pending_bytes", "_queue", "_queued", "_queued_bytes",
        "_raw", "_sending", "_writer", "closing", "overflowed", "principal", "queue_bytes",
        "queue_limit", "route", "sent", "sink", "token_hash",
    )

    def __init__(
        self,
        sink: Sink,
        principal: Principal,
        route: Route,
        *,
        queue_limit: int,
        on_close: Callable[[Stream], None],
        token_hash: str = "",
        queue_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.sink = sink
        self.principal = principal
        self.route = route
        self.queue_limit = queue_limit
        self.queue_bytes = queue_bytes
        self.token_hash = token_hash
        self.sent = 0
        self.overflowed = False
        self._on_close = on_close
        self._raw = sink.raw
        # (data, frames) chunks waiting for the socket; None while nothing waits.
        self._queue: deque[tuple[bytes, int]] | None = None
        self._queued = 0
        self._queued_bytes = 0
        self._pending: list[StoredEvent] | None = None
        self._pending_bytes = 0
        # After a replay: live events at or below this id were sent by the replay (0: none).
        self._floor = 0
        self._sending = False
        self._batch = 0
        self._backlog = 0
        self._backlog_bytes = 0
        self._closed = False
        self._writer: asyncio.Task[None] | None = None
        self.closing: asyncio.Task[None] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def queued_bytes(self) -> int:
        """Bytes of frames waiting for the socket."""
        return self._queued_bytes

    # ---- live delivery (synchronous, called from the bus handler) ---------------------

    def take(self, events: list[StoredEvent], data: bytes, batch: int) -> None:
        """Send or queue the ``events`` of one bus batch; never waits.

        ``data`` is their frames, encoded and joined (the same bytes for every stream of a
        bucket), written with one socket write. ``batch`` numbers the bus batch (see
        ``_push``).
        """
        if self._closed:
            return
        pending = self._pending
        if pending is not None:
            # Replaying: hold live events until the replay has caught up. A full buffer is
            # dropped rather than fatal, since every one of its events is in the log and
            # the replay reads the log again (see ``Hub._replay``).
            for event in events:
                size = len(event.frame)
                if (len(pending) >= self.queue_limit
                        or self._pending_bytes + size > self.queue_bytes):
                    pending.clear()
                    self._pending_bytes = 0
                    self.overflowed = True
                pending.append(event)
                self._pending_bytes += size
            return
        floor = self._floor
        if floor:
            # Events arrive in event_id order: once one is past what the replay sent, no
            # earlier one can follow.
            if events[-1].event_id <= floor:
                return
            if events[0].event_id <= floor:
                events = [event for event in events if event.event_id > floor]
                data = text_frames(e.frame for e in events) if self._raw else b""
            self._floor = 0
        if self._raw:
            self._push(data, len(events), batch)
        else:
            for event in events:
                self._push(event.frame, 1, batch)

    def deliver(self, event: StoredEvent, batch: int = -1) -> None:
        """``take`` for one event."""
        self.take([event], text_frame(event.frame) if self._raw else b"", batch)

    def _push(self, data: bytes, count: int, batch: int) -> None:
        """``data``: encoded frames (raw sink) or one frame payload (``count`` is then 1)."""
        if self._queue is None and not self._sending and self._raw and self.sink.writable():
            try:
                self.sink.write_raw(data)
            except Exception:  # the socket went away under us; its reader will notice
                self.abort("internal_error", "write failed")
                return
            self.sent += count
            return
        if batch != self._batch:
            self._batch = batch
            self._backlog = self._queued
            self._backlog_bytes = self._queued_bytes
        if self._sending and (self._backlog >= self.queue_limit
                              or self._backlog_bytes >= self.queue_bytes):
            # Slow means: a new batch finds queue_limit frames, or queue_bytes bytes, still
            # waiting while the socket refuses data (the writer is parked). One batch (at
            # most RIDECAST_GROUP_COMMIT_MAX_EVENTS frames) is always accepted whole, so a
            # healthy client is never cut off by a burst: a stream holds at most its limits
            # plus one batch.
            self.abort("slow_consumer", _SLOW_REASON)
            return
        if self._queue is None:
            self._queue = deque()
        self._queue.append((data, count))
        self._queued += count
        self._queued_bytes += len(data)
        if self._writer is None:
            # A writer task exists only while there is a backlog, so that 10,000 idle
            # streams cost no task each.
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        queue, sink, raw = self._queue, self.sink, self._raw
        try:
            while queue and not self._closed:
                if raw and sink.writable():
                    chunks: list[bytes] = []
                    size = count = 0
                    while queue and size < _FLUSH_BYTES:
                        data, frames = queue.popleft()
                        chunks.append(data)
                        size += len(data)
                        count += frames
                    self._queued -= count
                    self._queued_bytes -= size
                    sink.write_raw(b"".join(chunks))
                    self.sent += count
                    continue
                self._sending = True
                try:
                    if raw and sink.can_wait:
                        # Wait for the socket, then write the backlog in a few large
                        # writes rather than one frame at a time.
                        await sink.wait_writable()
                    else:
                        data, frames = queue.popleft()
                        self._queued -= frames
                        self._queued_bytes -= len(data)
                        await sink.send(data)
                        self.sent += frames
                finally:
                    self._sending = False
        except Exception:
            if not self._closed:
                self._closed = True
                self._on_close(self)
        finally:
            self._writer = None
            if not self._queue:
                self._queue = None
                self._queued = self._queued_bytes = 0

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
        if self._raw and self.sink.writable():
            self.sink.write_raw(text_frame(frame))
        else:
            await self.sink.send(frame)
        self.sent += 1

    def go_live(self, last_replayed: int) -> None:
        """Release held live events after ``last_replayed`` and deliver live from now on.

        Synchronous, so no live event can slip in between the held ones and the next.
        """
        pending, self._pending = self._pending or [], None
        self._pending_bytes = 0
        held = [event for event in pending if event.event_id > last_replayed]
        # An event the replay read may still come from the bus after this (committed before
        # the read, handed to this process after it: another node's, or a slow publisher):
        # until a newer one comes, ``take`` drops those the replay sent.
        self._floor = 0 if held else last_replayed
        if held and not self._closed:
            data = text_frames(event.frame for event in held) if self._raw else b""
            self.take(held, data, -1)

    # ---- closing -----------------------------------------------------------------------

    def abort(self, code: str, message: str | None = None) -> None:
        """Close with the table's close code for ``code``; safe to call from sync code."""
        if self._closed:
            return
        self._closed = True
        self._release()
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
        """The connection ended on its own: stop writes."""
        if not self._closed:
            self._closed = True
            self._release()
            self._on_close(self)
        if self._writer is not None:
            self._writer.cancel()

    def _release(self) -> None:
        """Let go of every queued frame now: the parked writer holds the deque itself, and
        would otherwise keep it until the connection ends (up to the linger time-out)."""
        if self._queue is not None:
            self._queue.clear()
        self._queue = None
        self._queued = self._queued_bytes = 0
        self._pending = None
        self._pending_bytes = 0
