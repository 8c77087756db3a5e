"""The lean reference client of ``bench/webhooks.py``: ``webhooks/http11.py``'s pool with
the connection it had before it parsed answers with llhttp in a Protocol (commit d6b51f1):
asyncio streams and a hand-written head parser.

Kept so that the reference the webhook ratio is measured against cannot be weakened by a
change to our own client's connection: the bench takes whichever of the two drives the
bench's receiver faster in the run (this one often does, at about the same CPU per request).
The pool (keep-alive, idle expiry, one retry on a stale connection) is ridecast's own.
"""

from __future__ import annotations

import asyncio

from ridecast.webhooks.http11 import (
    MAX_DRAIN_BYTES,
    MAX_HEAD_BYTES,
    Answer,
    ConnectionLost,
    Pool,
    ProtocolError,
)


class StreamsConn:
    """One keep-alive connection read through a stream reader (the former ``_Conn``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0
        self.reusable = False

    @property
    def closed(self) -> bool:
        return self.writer.is_closing() or self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()

    async def exchange(self, request: bytes, keep: int) -> Answer:
        """The former ``Pool._exchange``: write, read the head (past any 1xx), the body."""
        self.reusable = False
        try:
            self.writer.write(request)
            if self.writer.transport.get_write_buffer_size():
                await self.writer.drain()
            while True:
                head = await self.reader.readuntil(b"\r\n\r\n")
                status, headers = _parse_head(head)
                if not 100 <= status < 200:
                    break
            if status in (204, 304):
                body, reusable = b"", True
            else:
                body, reusable = await _read_body(self.reader, headers, keep)
        except asyncio.LimitOverrunError as exc:
            raise ProtocolError("answer head too large") from exc
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            raise ConnectionLost(str(exc), partial=bool(getattr(exc, "partial", b""))) from exc
        self.reusable = reusable and headers.get("connection", "").lower() != "close"
        return Answer(status, headers, body)


class StreamsPool(Pool):
    """ridecast's pool over ``StreamsConn`` connections (plain HTTP: the bench's receiver)."""

    async def _open(self, scheme: str, host: str, port: int, address: str
                    ) -> StreamsConn:  # type: ignore[override]
        reader, writer = await asyncio.open_connection(address, port, limit=MAX_HEAD_BYTES)
        return StreamsConn(reader, writer)


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
            size = int(line.split(b";", 1)[0].strip(), 16)
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
        length = int(length_text)
        if length > MAX_DRAIN_BYTES:
            return await reader.read(keep), False
        data = await reader.readexactly(length) if length else b""
        return data[:keep], True
    return await reader.read(keep), False  # no length: the body runs to the end
