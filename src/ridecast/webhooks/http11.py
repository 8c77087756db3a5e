"""A lean HTTP/1.1 client for webhook POSTs: keep-alive pool, connect to a given address.

Why not httpx: its CPU per request capped one process at a few hundred deliveries/s on a
small machine (docs/performance.md); this client does the one thing the
dispatcher needs (POST a body, read the status and the start of the answer) for a fraction
of that. It also makes "connect to the checked address" explicit: the caller passes the IP,
and the host name only travels as ``Host`` and as the TLS server name (SNI and certificate
check).

Connections are pooled per (scheme, host, port, address), so a TLS connection verified for
one name is never reused for another. A reused connection that turns out to be closed by
the server before any answer byte is retried once on a fresh one.

The answers are parsed by llhttp (Node.js's parser, through ``httptools``, which uvicorn
uses for requests): a maintained parser, strict about framing (a length given twice, or a
length beside chunked encoding, is refused), with our bounds on top: a head of at most
``MAX_HEAD_BYTES``, a body read to ``MAX_DRAIN_BYTES`` at most (then cut, and the connection
dropped), and any byte that does not belong to the answer asked for ends the connection.
Each connection is an ``asyncio.Protocol`` fed by the event loop's callbacks, with no
stream reader's coroutine per read: the framing is ours to keep strict.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import cast

import httptools

MAX_HEAD_BYTES = 64 * 1024
MAX_DRAIN_BYTES = 1024 * 1024  # answers longer than this are cut and the connection dropped
IDLE_EXPIRY_S = 30.0
MAX_IDLE_PER_KEY = 64

PoolKey = tuple[str, str, int, str]


class ProtocolError(ValueError):
    """Raised when the server's answer is not valid HTTP/1.1."""


class ConnectionLost(ConnectionError):
    """Raised when the connection ended before a complete answer; ``partial`` is True when
    some of the answer had arrived (the request reached the server: it is not retried)."""

    def __init__(self, message: str, *, partial: bool) -> None:
        super().__init__(message)
        self.partial = partial


class NotSent(Exception):
    """Raised when a request was not written because its ``start_by`` time had passed (the
    sender's lease no longer outlasts the request; ``Pool.post``)."""


class ConnectFailed(OSError):
    """Raised when no connection could be opened (``tls`` is True for a handshake failure)."""

    def __init__(self, message: str, *, tls: bool) -> None:
        super().__init__(message)
        self.tls = tls


@dataclass(slots=True)  # not frozen: made per delivery (see jobs.Job)
class Answer:
    """The server's answer: status, headers (lower-case names), first bytes of the body."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Conn(asyncio.Protocol):
    """One keep-alive connection: writes a request, and parses its answer with llhttp
    (``httptools``, the parser uvicorn serves with) as the bytes arrive, straight in the
    event loop's callbacks: no stream reader, no coroutine per read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.closed = False
        self.reusable = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._keep = 0
        self._got = 0  # bytes of this answer received so far
        self._head_open = True  # inside a head (the bytes count against MAX_HEAD_BYTES)
        self._head_fed = 0
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body = bytearray()
        self._body_total = 0
        self._until_close = False  # no length, not chunked: the body runs to the end

    # ---- the exchange (called by Pool) ---------------------------------------------------

    def exchange(self, request: bytes, keep: int) -> asyncio.Future[Answer]:
        """Send ``request``; the future gets the answer (or the reason there is none)."""
        assert self.transport is not None and self._waiter is None
        self._keep = keep
        self._got = self._head_fed = self._body_total = self._status = 0
        self._head_open, self.reusable, self._until_close = True, False, False
        self._headers = {}
        self._body = bytearray()
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)  # buffered by the transport: small, sent at once
        return waiter

    def close(self) -> None:
        self.closed = True
        self._waiter = None
        if self.transport is not None:
            self.transport.close()

    def _done(self, reusable: bool) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None:
            return
        self.reusable = reusable and not self.closed
        if not waiter.done():
            waiter.set_result(Answer(self._status, self._headers, bytes(self._body)))

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        self.reusable = False
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    # ---- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio's classes; they have their methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            self.close()  # bytes nobody asked for: the connection cannot be trusted again
            return
        self._got += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolError("the server switched protocols"))
            return
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"{type(exc).__name__}: {exc}"[:200]))
            return
        if self._head_open and self._waiter is not None:
            self._head_fed += len(data)
            if self._head_fed > MAX_HEAD_BYTES:
                self._fail(ProtocolError("answer head too large"))

    def eof_received(self) -> bool:
        self.closed = True
        self._lost(None)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)
        self.closed = True

    def _lost(self, exc: Exception | None) -> None:
        if self._waiter is None:
            return
        if self._until_close:
            self._done(False)  # the end of a body without length
            return
        reason = f": {exc}" if exc is not None else ""
        self._fail(ConnectionLost(f"connection closed before a complete answer{reason}",
                                  partial=self._got > 0))

    # ---- llhttp's callbacks (httptools) ------------------------------------------------

    def on_message_begin(self) -> None:
        if self._waiter is None:
            # A second answer to one request: the connection is out of step for good.
            self.reusable = False
            self.closed = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._head_open:  # not the trailers of a chunked body
            self._headers[name.decode("latin-1").lower()] = value.decode("latin-1").strip()

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        if self._status >= 200:
            self._head_open = False
            self._until_close = (
                self._status not in (204, 304) and "content-length" not in self._headers
                and "chunked" not in self._headers.get("transfer-encoding", "").lower())

    def on_body(self, body: bytes) -> None:
        if self._waiter is None:
            return
        room = self._keep - len(self._body)
        if room > 0:
            self._body += body[:room]
        self._body_total += len(body)
        if self._until_close:
            self._done(False)  # the first bytes are enough; the rest is not waited for
        elif self._body_total > MAX_DRAIN_BYTES:
            self._done(False)  # cut: the connection is dropped, not drained

    def on_message_complete(self) -> None:
        if self._status < 200:  # 1xx (interim): the answer follows on the same connection
            self._headers = {}
            self._head_fed = 0
            return
        self._done(self._parser.should_keep_alive())


class Pool:
    """Keep-alive connections per (scheme, host, port, address)."""

    def __init__(self, *, connect_timeout_s: float) -> None:
        self._connect_timeout = connect_timeout_s
        self._idle: dict[PoolKey, list[_Conn]] = {}
        self._ssl = ssl.create_default_context()

    async def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    def _take(self, key: PoolKey) -> _Conn | None:
        conns = self._idle.get(key)
        now = time.monotonic()
        while conns:
            conn = conns.pop()
            if now - conn.idle_since < IDLE_EXPIRY_S and not conn.closed:
                return conn
            conn.close()
        return None

    def _give_back(self, key: PoolKey, conn: _Conn) -> None:
        conns = self._idle.setdefault(key, [])
        if len(conns) >= MAX_IDLE_PER_KEY:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        conns.append(conn)

    async def _open(self, scheme: str, host: str, port: int, address: str) -> _Conn:
        tls = scheme == "https"
        loop = asyncio.get_running_loop()
        try:
            _transport, conn = await asyncio.wait_for(
                loop.create_connection(
                    _Conn, address, port, ssl=self._ssl if tls else None,
                    server_hostname=host if tls else None,
                ),
                self._connect_timeout,
            )
        except ssl.SSLError as exc:
            raise ConnectFailed(f"TLS handshake with {host}: {exc}", tls=True) from exc
        except OSError as exc:
            raise ConnectFailed(f"connect to {address}:{port}: {exc}", tls=False) from exc
        return conn

    async def post(
        self, scheme: str, host: str, port: int, address: str, request: bytes, keep: int,
        start_by: float | None = None,
    ) -> Answer:
        """Send ``request`` (a complete HTTP/1.1 request) and read the answer.

        Keeps at most ``keep`` bytes of the answer's body. Time-outs are the caller's
        (``asyncio.timeout`` around the call); the connect time-out is the pool's.
        ``start_by``: a wall-clock time (``time.time()``) after which the request must not be
        written; checked immediately before each write, with no ``await`` between the check
        and the write (``NotSent`` when it has passed).
        """
        key = (scheme, host, port, address)
        _fence(start_by)
        conn = self._take(key)
        if conn is not None:
            try:
                return await self._exchange(key, conn, request, keep)
            except ConnectionLost as exc:
                # The server closed an idle connection as we reused it: one fresh try.
                if exc.partial:
                    raise
        conn = await self._open(scheme, host, port, address)
        try:
            _fence(start_by)  # the connect took time: check again, just before the write
        except NotSent:
            self._give_back(key, conn)
            raise
        return await self._exchange(key, conn, request, keep)

    async def _exchange(self, key: PoolKey, conn: _Conn, request: bytes, keep: int) -> Answer:
        try:
            return await conn.exchange(request, keep)
        finally:
            # Given back only after a whole answer that leaves the connection open; closed
            # otherwise (an error, a cut body, or a time-out that cancelled this wait).
            if conn.reusable:
                conn.reusable = False
                self._give_back(key, conn)
            else:
                conn.close()


def _fence(start_by: float | None) -> None:
    if start_by is not None and time.time() > start_by:
        raise NotSent(f"not written: its start-by time passed {time.time() - start_by:.3f} s ago")


__all__ = ["Answer", "ConnectFailed", "ConnectionLost", "NotSent", "Pool", "ProtocolError"]
