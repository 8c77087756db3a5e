"""One websocket connection of a stream, as an asyncio protocol: the same on both ports.

``StreamProtocol`` takes a connection from its HTTP upgrade request to its end with
callbacks only: the ``websockets`` sans-I/O ``ServerProtocol`` parses the handshake and the
client's frames (pings answered, closes honoured, TEXT checked for UTF-8 by ``incoming.py``
and otherwise ignored), and frames go out with ``transport.write``. While the socket refuses
our writes, the connection stops reading: a client that sends pings and never reads cannot
pile up pongs, since it is not heard until it reads. While a stream is open there is no
task, no coroutine, no timer and no queue per connection: a short task runs the handshake
(the token check, then the replay of ``since=``) and ends once the stream is live;
keepalive pings and token expiry are swept hub-wide (``keepalive.py``, ``expiry.py``); the
send queue exists only while the socket refuses data (``connection.py``).

The dedicated port is an asyncio server of this protocol (``listener.py``). On the main HTTP
port, uvicorn hands over the connection at the upgrade (``asgi.direct_protocol``); a
websocket path outside ``/simulation_events`` is passed on to uvicorn's own
``websockets-sansio`` protocol and the application.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import Protocol, State
from websockets.server import ServerProtocol

from ..errors import RidecastError
from ..metrics import WS_DIRECT_STREAMS
from .connection import close_reason
from .frames import text_frame
from .hub import Hub, Prepared
from .incoming import TextCheck

log = logging.getLogger(__name__)

MAX_INCOMING = 64 * 1024
"""Largest message a client may send: streams are one-way, clients send nothing useful."""

OPEN_TIMEOUT = 10.0
"""Seconds a connection may take to complete its handshake (as ``websockets``' default)."""

CLOSE_TIMEOUT = 2.0
"""Seconds the peer has to answer our close frame before we close the TCP connection."""

LINGER_TIMEOUT = 30.0
"""Seconds a closed connection may take to flush what it has buffered (a slow consumer's
frames and close frame, which it reads when it wakes up) before it is dropped."""

STREAMS_PREFIX = "/simulation_events"

_PING = b"ridecast"
_ws_logger = logging.getLogger("websockets.server")

# Connection states (one small int rather than several flags).
_HANDSHAKE, _OPEN, _CLOSING, _GONE = 0, 1, 2, 3


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


class StreamProtocol(asyncio.Protocol):
    """A stream's websocket connection, and the ``Sink`` its ``Stream`` writes to.

    ``hub`` serves it; ``registry`` is a set the connection sits in while it is alive
    (uvicorn's ``server_state.connections``, whose ``shutdown()`` it then answers);
    ``fallback`` is uvicorn's (config, server_state, app_state), to pass other paths on.
    """

    __slots__ = (
        "_conn", "_fallback", "_hub", "_paused", "_pinged", "_registry", "_state",
        "_stream", "_task", "_text", "_timer", "_transport", "_waiter",
    )

    raw = True
    can_wait = True

    def __init__(self, hub: Hub | None, *, registry: set[Any] | None = None,
                 fallback: tuple[Any, Any, Any] | None = None) -> None:
        self._hub = hub
        self._registry = registry
        self._fallback: Any = fallback  # then uvicorn's protocol, when it takes over
        self._conn = ServerProtocol(max_size=MAX_INCOMING, logger=_ws_logger)
        self._transport: asyncio.Transport | None = None
        self._state = _HANDSHAKE
        self._paused = False
        self._pinged = False
        # Made at the first TEXT frame: most clients send none.
        self._text: TextCheck | None = None
        self._stream: Any = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        # A future while someone waits: for writability, or (closing) for the end.
        self._waiter: asyncio.Future[None] | None = None

    # ---- asyncio callbacks -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        if self._registry is not None:
            self._registry.add(self)
        self._timer = asyncio.get_running_loop().call_later(OPEN_TIMEOUT, self._drop)

    def data_received(self, data: bytes) -> None:
        if self._state is _GONE:
            return
        if self._delegate is not None:
            self._delegate.data_received(data)
            return
        conn = self._conn
        try:
            conn.receive_data(data)
        except EOFError:  # data after the end: nothing to read any more
            return
        for event in conn.events_received():
            if isinstance(event, Frame):
                opcode = event.opcode
                if opcode is Opcode.PONG:
                    self._pinged = False
                elif opcode is Opcode.TEXT or opcode is Opcode.CONT:
                    if self._text is None:
                        self._text = TextCheck()
                    if not self._text.accepts(event) and conn.state is State.OPEN:
                        conn.fail(*close_reason("invalid_utf8"))
                        break
                # Messages are otherwise ignored; PING and CLOSE are answered by ``conn``.
            elif isinstance(event, Request) and self._task is None:
                self._on_request(event, data)
                if self._delegate is not None:
                    return
        self._send_pending()

    def eof_received(self) -> bool | None:
        if self._delegate is not None:
            return bool(self._delegate.eof_received())
        self._conn.receive_eof()
        self._send_pending()
        return None

    def pause_writing(self) -> None:
        if self._delegate is not None:
            self._delegate.pause_writing()
            return
        self._paused = True
        # Stop hearing the client while it does not read: what it sends (pings above all)
        # would make answers we could only buffer. TCP's flow control then slows it down.
        transport = self._transport
        if transport is not None and self._state is not _GONE and not transport.is_closing():
            transport.pause_reading()

    def resume_writing(self) -> None:
        if self._delegate is not None:
            self._delegate.resume_writing()
            return
        self._paused = False
        transport = self._transport
        if transport is not None and self._state is not _GONE and not transport.is_closing():
            transport.resume_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._delegate is not None:
            self._delegate.connection_lost(exc)
            return
        self._state = _GONE
        if self._registry is not None:
            self._registry.discard(self)
        if self._hub is not None:
            self._hub.keepalive.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.detach()

    @property
    def _delegate(self) -> Any:
        """uvicorn's protocol, when it serves this connection (not a stream path)."""
        fallback = self._fallback
        return None if fallback is None or isinstance(fallback, tuple) else fallback

    # ---- handshake ---------------------------------------------------------------------

    def _on_request(self, request: Request, data: bytes) -> None:
        url = urlsplit(request.path)
        fallback = self._fallback
        if isinstance(fallback, tuple):
            self._fallback = None
            if not url.path.startswith(STREAMS_PREFIX):
                self._pass_on(fallback, data)
                return
        if self._hub is None:  # pragma: no cover - the lifespan builds it before serving
            self._refuse(503)
            return
        self._task = asyncio.get_running_loop().create_task(self._handshake(request, url))

    def _pass_on(self, fallback: tuple[Any, Any, Any], data: bytes) -> None:
        """Hand the connection to uvicorn's own protocol, which sees the same request."""
        from uvicorn.protocols.websockets.websockets_sansio_impl import (
            WebSocketsSansIOProtocol,
        )

        config, server_state, app_state = fallback
        if self._registry is not None:
            self._registry.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        delegate = WebSocketsSansIOProtocol(config, server_state, app_state)
        self._fallback = delegate
        assert self._transport is not None
        delegate.connection_made(self._transport)
        delegate.data_received(data)
        self._transport.set_protocol(delegate)

    def _refuse(self, status: int) -> None:
        conn = self._conn
        conn.send_response(conn.reject(status, "the service is not ready\n"))
        self._send_pending()

    async def _handshake(self, request: Request, url: Any) -> None:
        hub, conn = self._hub, self._conn
        assert hub is not None
        response = conn.accept(request)
        if response.status_code != 101:  # not a valid websocket upgrade: an HTTP answer
            conn.send_response(response)
            self._send_pending()
            return
        query = parse_qs(url.query, keep_blank_values=True)
        try:
            prepared = await hub.prepare(
                self, url.path, _first(query, "token"), request.headers.get("Authorization"),
                _first(query, "since"),
            )
        except Exception:  # pragma: no cover - prepare answers refusals itself
            log.exception("preparing a stream failed")
            prepared = Prepared(self, None, None, RidecastError("internal error"))
        if self._state is not _HANDSHAKE:  # the client left while its token was checked
            hub.discard(prepared)
            return
        del request, url, query
        conn.send_response(response)
        del response
        if not conn.reader.buffer:
            # The handshake parser's frame keeps the request (its headers) for as long as
            # the connection lives; a frame parser of its own forgets it.
            conn.parser = Protocol.parse(conn)
            next(conn.parser)
        self._state = _OPEN
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._send_pending()
        hub.keepalive.add(self)
        if self._registry is not None:
            WS_DIRECT_STREAMS.inc()
        self._stream = prepared.stream
        try:
            await hub.start(prepared)
        finally:
            self._task = None

    # ---- output ------------------------------------------------------------------------

    def _send_pending(self) -> None:
        """Write what ``conn`` has to send (handshake answer, pong, close); end the TCP
        connection when it says so."""
        conn, transport = self._conn, self._transport
        data = conn.data_to_send()
        if transport is None or not data:
            return
        payload = b"".join(data)
        if payload and not transport.is_closing():
            transport.write(payload)
        if conn.state is not State.OPEN and self._state is _OPEN:
            self._state = _CLOSING
        if data[-1] == b"":  # the end of the stream: the server closes TCP first
            self._close_transport()

    def _close_transport(self) -> None:
        transport = self._transport
        if transport is None or self._state is _GONE:
            return
        if self._state is not _HANDSHAKE:
            self._state = _CLOSING
        transport.close()
        # A peer that reads nothing would keep the socket open while the buffer drains.
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(LINGER_TIMEOUT, self._drop)

    def _linger(self) -> None:
        """The peer did not answer our close frame: close, letting the buffer drain."""
        self._timer = None
        self._close_transport()

    def _drop(self) -> None:
        self._timer = None
        if self._transport is not None and self._state is not _GONE:
            self._transport.abort()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def keepalive(self) -> None:
        """Ping the peer, or fail the connection when the previous ping is unanswered."""
        if self._state is not _OPEN:
            return
        conn = self._conn
        if self._pinged:
            conn.fail(1011, "keepalive ping timeout")
        else:
            self._pinged = True
            conn.send_ping(_PING)
        self._send_pending()

    def shutdown(self) -> None:
        """uvicorn is stopping (the hub has closed the streams already)."""
        if self._delegate is not None:
            self._delegate.shutdown()
            return
        if self._state is _OPEN:
            self._conn.send_close(1012)
            self._send_pending()
        self._close_transport()

    # ---- Sink --------------------------------------------------------------------------

    def writable(self) -> bool:
        return self._state is _OPEN and not self._paused

    def write_raw(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    async def send(self, frame: bytes) -> None:
        await self.wait_writable()
        self.write_raw(text_frame(frame))

    async def wait_writable(self) -> None:
        while self._state is _OPEN and self._paused:
            if self._waiter is None:
                self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self._state is not _OPEN:
            raise ConnectionError("the websocket is closed")

    async def close(self, code: int, reason: str) -> None:
        """Send a close frame, then wait (at most ``CLOSE_TIMEOUT``) for the connection's end."""
        if self._state is _OPEN:
            if self._hub is not None:
                self._hub.keepalive.discard(self)
            self._conn.send_close(code, reason)
            self._send_pending()
            self._state = _CLOSING
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(CLOSE_TIMEOUT, self._linger)
        await self.wait_closed()

    async def wait_closed(self) -> None:
        while self._state is not _GONE:
            if self._waiter is None:
                self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
