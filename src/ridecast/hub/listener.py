"""The dedicated websocket listener: the ``websockets`` asyncio server, on its own port.

Same process, same event loop and same ``Hub`` as the HTTP port; only the transport
differs. Frames are written straight into the connection, the way
``websockets.broadcast`` does, so a delivery costs one frame encoding and one
``transport.write``, with no ASGI message in between. Enabled by ``RIDECAST_WS_PORT``.
"""

from __future__ import annotations

import contextlib
import ssl
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State

from .hub import Hub, Prepared

MAX_INCOMING = 64 * 1024
"""Largest frame a client may send: streams are one-way, clients send nothing useful."""


class WebsocketsSink:
    """A ``websockets`` server connection as a ``Sink``."""

    __slots__ = ("_conn",)

    def __init__(self, conn: ServerConnection) -> None:
        self._conn = conn

    def writable(self) -> bool:
        conn = self._conn
        # ``paused`` is set by the transport above its high-water mark: from then on the
        # frames wait in the stream's bounded queue, not in an unbounded write buffer.
        return not conn.paused and conn.protocol.state is State.OPEN

    def write(self, frame: bytes) -> None:
        self._conn.protocol.send_text(frame)

    def flush(self) -> None:
        conn = self._conn
        if conn.protocol.state is State.OPEN:
            # One transport.write for every frame buffered since the last flush: with
            # a batch of events that is one send() per connection instead of one per frame.
            data = conn.protocol.data_to_send()
            if data:
                conn.transport.write(b"".join(data))
        else:  # closing: let websockets handle the close frame and the half-close
            conn.send_data()

    async def send(self, frame: bytes) -> None:
        await self._conn.send(frame, text=True)

    @property
    def can_wait(self) -> bool:
        return True

    async def wait_writable(self) -> None:
        conn = self._conn
        await conn.drain()
        if conn.protocol.state is not State.OPEN:
            raise ConnectionError("the websocket is closed")

    async def close(self, code: int, reason: str) -> None:
        await self._conn.close(code, reason)

    async def wait_closed(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for _message in self._conn:
                pass


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


async def start_listener(
    hub: Hub, host: str, port: int, *, ping_interval: float, tls: ssl.SSLContext | None = None
) -> Server:
    """Listen on ``host:port`` for the websocket paths; ``server.close()`` stops it."""

    # Authorised and subscribed in process_request, before the 101 answer, so that a
    # client's connect() returns only once it receives every new event.
    prepared: dict[ServerConnection, Prepared] = {}

    async def process_request(conn: ServerConnection, request: Request) -> None:
        url = urlsplit(request.path)
        query = parse_qs(url.query, keep_blank_values=True)
        prepared[conn] = await hub.prepare(
            WebsocketsSink(conn), url.path, _first(query, "token"),
            request.headers.get("Authorization"), _first(query, "since"),
        )

    def process_response(conn: ServerConnection, request: Request, response: Response) -> None:
        if response.status_code != 101:  # the handshake failed: the handler never runs
            entry = prepared.pop(conn, None)
            if entry is not None:
                hub.discard(entry)

    async def handler(conn: ServerConnection) -> None:
        entry = prepared.pop(conn, None)
        if entry is not None:
            await hub.run(entry)

    return await serve(
        handler,
        host,
        port,
        process_request=process_request,
        process_response=process_response,
        # Frames are small JSON sent to many clients; per-connection deflate would cost
        # more CPU than the bandwidth it saves, and it defeats encode-once.
        compression=None,
        ping_interval=ping_interval,
        ping_timeout=ping_interval,
        close_timeout=2,
        max_size=MAX_INCOMING,
        ssl=tls,
    )
