"""The lean HTTP/1.1 client against scripted servers: framing, keep-alive, closed sockets, TLS."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from ridecast.webhooks.http11 import ConnectFailed, Pool, ProtocolError

REQUEST = (b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
           b"content-length: 2\r\n\r\n{}")

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(script: Script) -> tuple[asyncio.Server, int, list[int]]:
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await script(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1]), connections


async def _read_request(reader: asyncio.StreamReader) -> None:
    await reader.readuntil(b"\r\n\r\n")
    await reader.readexactly(2)


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

    server, port, connections = await _serve(script)
    pool = Pool(connect_timeout_s=1)
    try:
        assert await _post(pool, port) == (200, b"abcde")
        assert await _post(pool, port) == (500, b"fail")
        assert await _post(pool, port) == (204, b"")
    finally:
        await pool.close()
        server.close()
    assert len(connections) == 1


async def test_stale_connection_retried_once_and_close_delimited_body() -> None:
    """A pooled connection closed by the server is replaced; a body without length ends at EOF."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()  # then close: the pooled connection goes stale

    server, port, connections = await _serve(script)
    pool = Pool(connect_timeout_s=1)
    try:
        assert await _post(pool, port) == (200, b"ok")
        await asyncio.sleep(0.05)
        assert await _post(pool, port) == (200, b"ok")
    finally:
        await pool.close()
        server.close()
    assert len(connections) == 2

    async def eof_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 202 Accepted\r\n\r\nuntil the end")

    server, port, _ = await _serve(eof_body)
    pool = Pool(connect_timeout_s=1)
    try:
        assert await _post(pool, port) == (202, b"until the end")
    finally:
        await pool.close()
        server.close()


async def test_garbage_answer_is_a_protocol_error() -> None:
    """An answer that is not HTTP/1.1 raises ProtocolError."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")

    server, port, _ = await _serve(script)
    pool = Pool(connect_timeout_s=1)
    try:
        with pytest.raises(ProtocolError):
            await _post(pool, port)
    finally:
        await pool.close()
        server.close()


async def test_tls_handshake_failure_is_reported_as_tls() -> None:
    """https to a server that does not speak TLS fails as a TLS error, not a connect error."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    server, port, _ = await _serve(script)
    pool = Pool(connect_timeout_s=1)
    try:
        with pytest.raises(ConnectFailed) as caught:
            await pool.post("https", "localhost", port, "127.0.0.1", REQUEST, 1024)
    finally:
        await pool.close()
        server.close()
    assert caught.value.tls
