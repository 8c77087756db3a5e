"""The lean HTTP/1.1 client against scripted servers: framing, keep-alive, closed sockets, TLS."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from ridecast.webhooks.http11 import (
    MAX_DRAIN_BYTES,
    MAX_HEAD_BYTES,
    ConnectFailed,
    ConnectionLost,
    Pool,
    ProtocolError,
)
from tests.waiting import eventually_async

REQUEST = (b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: 2\r\n\r\n{}")

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Connections(list[int]):
    """The scripted server's connections (an item each), and how many it has closed."""

    closed = 0


async def _serve(script: Script) -> tuple[asyncio.Server, int, Connections]:
    connections = Connections()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await script(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            connections.closed += 1

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1]), connections


async def _read_request(reader: asyncio.StreamReader) -> None:
    await reader.readuntil(b"\r\n\r\n")
    await reader.readexactly(2)


@contextlib.asynccontextmanager
async def _scripted(script: Script) -> AsyncIterator[tuple[Pool, int, Connections]]:
    """A pool, and the port of a server running ``script`` per connection (and the list of
    its connections); both closed after."""
    server, port, connections = await _serve(script)
    pool = Pool(connect_timeout_s=1)
    try:
        yield pool, port, connections
    finally:
        await pool.close()
        server.close()


async def _post(pool: Pool, port: int) -> tuple[int, bytes]:
    answer = await pool.post("http", "x", port, "127.0.0.1", REQUEST, 1024)
    return answer.status, answer.body


async def test_keep_alive_reuses_one_connection_with_chunked_and_sized_bodies() -> None:
    """Chunked and content-length answers are read whole and the connection is reused."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
                     b"transfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n")
        await _read_request(reader)
        writer.write(b"HTTP/1.1 500 Oops\r\ncontent-length: 4\r\n\r\nfail")
        await _read_request(reader)
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await reader.read()

    async with _scripted(script) as (pool, port, connections):
        assert await _post(pool, port) == (200, b"abcde")
        assert await _post(pool, port) == (500, b"fail")
        assert await _post(pool, port) == (204, b"")
    assert len(connections) == 1


async def test_stale_connection_retried_once_and_close_delimited_body() -> None:
    """A pooled connection closed by the server is replaced; a body without length ends at EOF."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()  # then close: the pooled connection goes stale

    async with _scripted(script) as (pool, port, connections):
        assert await _post(pool, port) == (200, b"ok")
        await eventually_async(lambda: connections.closed == 1,
                               what="the server closing the pooled connection")
        assert await _post(pool, port) == (200, b"ok")
    assert len(connections) == 2

    async def eof_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 202 Accepted\r\n\r\nuntil the end")

    async with _scripted(eof_body) as (pool, port, _):
        assert await _post(pool, port) == (202, b"until the end")


async def test_garbage_answer_is_a_protocol_error() -> None:
    """An answer that is not HTTP/1.1 raises ProtocolError."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")

    async with _scripted(script) as (pool, port, _):
        with pytest.raises(ProtocolError):
            await _post(pool, port)


async def test_tls_handshake_failure_is_reported_as_tls() -> None:
    """https to a server that does not speak TLS fails as a TLS error, not a connect error."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    async with _scripted(script) as (pool, port, _):
        with pytest.raises(ConnectFailed) as caught:
            await pool.post("https", "localhost", port, "127.0.0.1", REQUEST, 1024)
    assert caught.value.tls


def _answer_with(chunks: list[bytes]) -> Script:
    """A script that answers each request it reads with ``chunks``, written one by one."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _read_request(reader)
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()

    return script


CHUNKED = (b"HTTP/1.1 100 Continue\r\n\r\n"
           b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Kind: final\r\n\r\n"
           b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nx-trailer: t\r\n\r\n")


@pytest.mark.parametrize("piece", [1, 2, 7, len(CHUNKED)])
async def test_an_answer_split_anywhere_parses_the_same(piece: int) -> None:
    """An interim 100, a chunked body with an extension and trailers, written in pieces of
    ``piece`` bytes: one answer, the final head's headers only, the connection kept."""
    chunks = [CHUNKED[i:i + piece] for i in range(0, len(CHUNKED), piece)]
    async with _scripted(_answer_with(chunks)) as (pool, port, connections):
        for _ in range(2):
            answer = await pool.post("http", "x", port, "127.0.0.1", REQUEST, 1024)
            assert (answer.status, answer.body) == (200, b"abcdefg")
            assert answer.headers == {"transfer-encoding": "chunked", "x-kind": "final"}
    assert len(connections) == 1


async def test_limits_and_broken_framing_end_the_connection() -> None:
    """A head past MAX_HEAD_BYTES and a duplicated length are protocol errors; a body past
    MAX_DRAIN_BYTES is cut to what is kept and its connection dropped."""
    endless_head = [b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * (MAX_HEAD_BYTES + 10)]
    async with _scripted(_answer_with(endless_head)) as (pool, port, _):
        with pytest.raises(ProtocolError, match="head too large"):
            await _post(pool, port)

    twice = [b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nok"]
    async with _scripted(_answer_with(twice)) as (pool, port, _):
        with pytest.raises(ProtocolError):
            await _post(pool, port)

    size = MAX_DRAIN_BYTES + 65536
    huge = [b"HTTP/1.1 500 Oops\r\ncontent-length: %d\r\n\r\n" % size,
            *[b"x" * 65536] * (size // 65536)]
    async with _scripted(_answer_with(huge)) as (pool, port, connections):
        for _ in range(2):
            answer = await pool.post("http", "x", port, "127.0.0.1", REQUEST, 100)
            assert (answer.status, answer.body) == (500, b"x" * 100)
    assert len(connections) == 2  # the cut connection was not reused


async def test_a_cut_answer_is_not_retried_and_extra_answers_spoil_the_connection() -> None:
    """The connection ending inside an answer raises ConnectionLost (partial: the request
    arrived, so it is not sent again); an answer followed by bytes nobody asked for is
    returned, and its connection is not reused."""
    async def cut_then_close(reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        await writer.drain()

    async with _scripted(cut_then_close) as (pool, port, connections):
        with pytest.raises(ConnectionLost) as lost:
            await _post(pool, port)
    assert lost.value.partial and len(connections) == 1

    doubled = [b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"]
    async with _scripted(_answer_with(doubled)) as (pool, port, connections):
        assert await _post(pool, port) == (204, b"")
        await eventually_async(lambda: connections.closed == 1,
                               what="the server closing the doubled answer's connection")
        assert await _post(pool, port) == (204, b"")
    assert len(connections) == 2
