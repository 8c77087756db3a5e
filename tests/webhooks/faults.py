"""A misbehaving webhook receiver on loopback: resets, stalls, huge bodies, broken HTTP.

``FaultServer(fault)`` runs an asyncio TCP server in a thread; ``fault`` decides what each
request gets. It reads the request first (head and body), so the sender always finishes
writing before the fault happens.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable

Fault = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bool:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return True


async def reset(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0) instead of answering."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def stall(_reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
    """Never answer (the connection stays open)."""
    await asyncio.sleep(3600)


async def huge_500(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A 500 announcing a 64 MiB body, streamed until the client goes away."""
    size = 64 * 1024 * 1024
    writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: %d\r\n\r\n" % size)
    chunk = b"x" * 65536
    try:
        for _ in range(size // len(chunk)):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        return


async def broken(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Something that is not HTTP."""
    writer.write(b"HELLO THERE\r\n\r\n")
    await writer.drain()


async def redirect(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A 301 pointing elsewhere (must never be followed)."""
    writer.write(b"HTTP/1.1 301 Moved\r\nlocation: http://127.0.0.1:9/x\r\ncontent-length: 0\r\n"
                 b"\r\n")
    await writer.drain()


class FaultServer:
    """Serves ``fault`` to every request on a free loopback port; counts requests."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.requests: list[float] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                if await _read_request(reader):
                    self.requests.append(time.time())
                    await self.fault(reader, writer)
            except (ConnectionError, OSError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        async def main() -> asyncio.Server:
            return await asyncio.start_server(serve, "127.0.0.1", 0)

        server = self._loop.run_until_complete(main())
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        self._loop.run_forever()
        server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def __enter__(self) -> FaultServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
