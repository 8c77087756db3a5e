"""The lean reference client of ``bench/webhooks.py``: ``webhooks/http11.py`` as it was
before it parsed answers with llhttp in a Protocol (commit d6b51f1), on asyncio streams.

Kept here unchanged so that the reference the webhook ratio is measured against cannot be
weakened by a change to our own client: the bench takes whichever of the two drives the
bench's receiver faster in the run (this one often does, at about the same CPU per request).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
MAX_DRAIN_BYTES = 1024 * 1024  # answers longer than this are cut and the connection dropped
IDLE_EXPIRY_S = 30.0
MAX_IDLE_PER_KEY = 64

PoolKey = tuple[str, str, int, str]


class ProtocolError(ValueError):
    """Raised when the server's answer is not valid HTTP/1.1."""


class ConnectFailed(OSError):
    """Raised when no connection could be opened (``tls`` is True for a handshake failure)."""

    def __init__(self, message: str, *, tls: bool) -> None:
        super().__init__(message)
        self.tls = tls


@dataclass(slots=True)  # not frozen: made per delivery (see outbox.Job)
class Answer:
    """The server's answer: status, headers (lower-case names), first bytes of the body."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Conn:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        self.writer.close()


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
            if now - conn.idle_since < IDLE_EXPIRY_S and not conn.reader.at_eof():
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
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    address, port, ssl=self._ssl if tls else None,
                    server_hostname=host if tls else None, limit=MAX_HEAD_BYTES,
                ),
                self._connect_timeout,
            )
        except ssl.SSLError as exc:
            raise ConnectFailed(f"TLS handshake with {host}: {exc}", tls=True) from exc
        except OSError as exc:
            raise ConnectFailed(f"connect to {address}:{port}: {exc}", tls=False) from exc
        return _Conn(reader, writer)

    async def post(
        self, scheme: str, host: str, port: int, address: str, request: bytes, keep: int
    ) -> Answer:
        """Send ``request`` (a complete HTTP/1.1 request) and read the answer.

        Keeps at most ``keep`` bytes of the answer's body. Time-outs are the caller's
        (``asyncio.timeout`` around the call); the connect time-out is the pool's.
        """
        key = (scheme, host, port, address)
        conn = self._take(key)
        if conn is not None:
            try:
                return await self._exchange(key, conn, request, keep)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                # The server closed an idle connection as we reused it: one fresh try.
                if getattr(exc, "partial", b""):
                    raise
        conn = await self._open(scheme, host, port, address)
        return await self._exchange(key, conn, request, keep)

    async def _exchange(self, key: PoolKey, conn: _Conn, request: bytes, keep: int) -> Answer:
        reusable = False
        try:
            writer = conn.writer
            writer.write(request)
            if writer.transport.get_write_buffer_size():
                # Flow control only: a small request is usually written at once. A lost
                # connection shows on the read below either way.
                await writer.drain()
            while True:
                head = await conn.reader.readuntil(b"\r\n\r\n")
                status, headers = _parse_head(head)
                if not 100 <= status < 200:
                    break
            if status in (204, 304):
                body, reusable = b"", True  # never a body (RFC 9112 section 6.3)
            else:
                body, reusable = await _read_body(conn.reader, headers, keep)
            if headers.get("connection", "").lower() == "close":
                reusable = False
            return Answer(status, headers, body)
        except asyncio.LimitOverrunError as exc:
            raise ProtocolError("answer head too large") from exc
        finally:
            if reusable:
                self._give_back(key, conn)
            else:
                conn.close()


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"bad header line: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _read_body(
    reader: asyncio.StreamReader, headers: dict[str, str], keep: int
) -> tuple[bytes, bool]:
    """(first ``keep`` bytes of the body, whether the connection can be reused)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        kept = bytearray()
        total = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise ProtocolError("bad chunk size") from exc
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return bytes(kept[:keep]), True
            total += size
            if total > MAX_DRAIN_BYTES:
                return bytes(kept[:keep]), False
            chunk = await reader.readexactly(size + 2)
            if len(kept) < keep:
                kept += chunk[:-2]
    length_text = headers.get("content-length")
    if length_text is not None:
        try:
            length = int(length_text)
        except ValueError as exc:
            raise ProtocolError("bad content-length") from exc
        if length > MAX_DRAIN_BYTES:
            return await reader.read(keep), False
        data = await reader.readexactly(length) if length else b""
        return data[:keep], True
    # No length: the body runs to the end of the connection.
    data = await reader.read(keep)
    return data, False


__all__ = ["Answer", "ConnectFailed", "Pool", "ProtocolError"]
