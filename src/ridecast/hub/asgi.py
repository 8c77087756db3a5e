"""The websocket paths on the main HTTP port.

Clients use one base URL, so ``/simulation_events/...`` must work on the API's own port.

``ridecast serve`` gives uvicorn ``direct_protocol(...)`` as its websocket protocol: at the
HTTP upgrade, uvicorn hands the connection to ``StreamProtocol`` (``protocol.py``), the
handler of the dedicated port, so a stream costs the same and is written the same way on
both ports, past the ASGI application, its middleware and uvicorn's per-connection state
(``ridecast_ws_direct_streams_total`` counts these streams). Other websocket paths are
passed on to uvicorn's ``websockets-sansio`` protocol and the application.

Under any other ASGI server the streams are served by ``StreamsEndpoint`` (see
``websocket_routes``) through ASGI ``websocket.send`` messages (``AsgiSink``): correct,
slower.

``ShutdownFirstServer`` makes uvicorn let the hub close every stream with 1001 before it
closes the connections itself (with 1012), and accept and read every connection the kernel
has queued before it closes its listening sockets (``accept_drain``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any, ClassVar
from urllib.parse import parse_qs

import uvicorn
from starlette.routing import WebSocketRoute
from starlette.types import Receive, Scope, Send

from .accept_drain import drain_accept_queues, unread_bytes
from .hub import Hub
from .protocol import STREAMS_PREFIX, StreamProtocol


class AsgiSink:
    """An accepted ASGI websocket as a ``Sink``: every frame goes through ``send``."""

    __slots__ = ("_closed", "_receive", "_send")

    raw = False

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._closed = False

    def writable(self) -> bool:
        # ASGI has no synchronous write: every frame takes the queued path.
        return False

    def write_raw(self, data: bytes) -> None:  # pragma: no cover - not raw
        raise RuntimeError("an ASGI websocket has no synchronous write")

    async def send(self, frame: bytes) -> None:
        await self._send({"type": "websocket.send", "text": frame.decode()})

    @property
    def can_wait(self) -> bool:
        return False

    async def wait_writable(self) -> None:  # pragma: no cover - can_wait is False
        raise RuntimeError("an ASGI websocket cannot wait for writability")

    async def close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def wait_closed(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                self._closed = True
                return


HubSource = Callable[[], "Hub | None"]
"""Where the protocol finds the hub: it is built in the app's lifespan, after the routes."""


class MainPortProtocol(StreamProtocol):
    """``StreamProtocol`` as uvicorn builds a websocket protocol at an upgrade.

    Build the class with ``direct_protocol``, which sets ``hub_source``.
    """

    __slots__ = ()

    hub_source: ClassVar[HubSource]

    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: dict[str, Any],
                 _loop: Any = None) -> None:
        super().__init__(type(self).hub_source(), registry=server_state.connections,
                         fallback=(config, server_state, app_state))


def direct_protocol(hub: HubSource) -> type[MainPortProtocol]:
    """The protocol class for uvicorn's ``ws=``, serving streams with the hub of ``hub()``."""
    return type("RidecastWebSocketProtocol", (MainPortProtocol,),
                {"__slots__": (), "hub_source": staticmethod(hub)})


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


class StreamsEndpoint:
    """ASGI app of every ``/simulation_events...`` path: the hub authorises and subscribes,
    then the handshake is accepted (refusals are close frames after it)."""

    def __init__(self, hub: HubSource) -> None:
        self._hub = hub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":  # pragma: no cover - ASGI guarantees it
            return
        hub = self._hub()
        if hub is None:  # pragma: no cover - the lifespan builds it before serving
            await send({"type": "websocket.close", "code": 1011})
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"),
                         keep_blank_values=True)
        header = None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value.decode("latin-1")
                break

        async def accept() -> None:
            await send({"type": "websocket.accept"})

        await hub.serve(AsgiSink(receive, send), scope["path"], _first(query, "token"),
                        header, _first(query, "since"), accept)


def websocket_routes(hub: HubSource) -> list[WebSocketRoute]:
    """Routes to add to the application: every path under ``/simulation_events`` (used
    when the server is not run with ``direct_protocol``, e.g. under another ASGI server)."""
    # Starlette wraps a plain function as a WebSocket session; an object is used as ASGI.
    return [WebSocketRoute(STREAMS_PREFIX + "{rest:path}", StreamsEndpoint(hub))]


#: Longest a shutdown waits for queued connections to be accepted and their requests read.
DRAIN_TIMEOUT_S = 1.0
_NOT_HTTP = object()


class ShutdownFirstServer(uvicorn.Server):
    """uvicorn, except that websocket streams are closed with 1001 before anything else,
    and that a TLS handshake gets ``handshake_timeout_s`` (asyncio's default is a minute,
    and uvicorn passes none: a client that never sends its hello would hold a descriptor
    and its buffers that long)."""

    def __init__(self, config: uvicorn.Config, app: Any,
                 handshake_timeout_s: float | None = None) -> None:
        super().__init__(config)
        self._app = app
        self._handshake_timeout_s = handshake_timeout_s

    async def startup(self, sockets: Any = None) -> None:
        timeout = self._handshake_timeout_s
        if self.config.ssl is None or timeout is None:
            await super().startup(sockets=sockets)
            return
        loop = asyncio.get_running_loop()
        create = loop.create_server

        async def bounded(*args: Any, **kwargs: Any) -> asyncio.Server:
            kwargs.setdefault("ssl_handshake_timeout", timeout)
            return await create(*args, **kwargs)

        # uvicorn's startup calls the loop's create_server: the instance attribute stands
        # in for the method while it runs.
        loop.create_server = bounded  # type: ignore[method-assign]
        try:
            await super().startup(sockets=sockets)
        finally:
            del loop.create_server

    async def shutdown(self, sockets: Any = None) -> None:
        hub = getattr(self._app.state, "hub", None)
        if hub is not None:
            await hub.close()
        # uvicorn's shutdown closes the listening sockets, then every connection without a
        # request under way: first let it accept what the kernel queued and read those
        # requests, so that none is reset (``accept_drain``). Not on a socket it was handed
        # (uvicorn's workers, an inherited descriptor): others accept on it, before and after
        # this process, and the filter would stop new connections for them too.
        if sockets is None and self.config.fd is None:
            listening = [sock for server in self.servers for sock in server.sockets]
            await drain_accept_queues(listening, DRAIN_TIMEOUT_S,
                                      lambda: unread_requests(self.server_state.connections))
        await super().shutdown(sockets=sockets)


def unread_requests(connections: Iterable[Any]) -> int:
    """uvicorn HTTP connections with no request under way and bytes waiting to be read:
    those its shutdown would close with a request unread."""
    count = 0
    for connection in connections:
        cycle: Any = getattr(connection, "cycle", _NOT_HTTP)
        if cycle is _NOT_HTTP or (cycle is not None and not cycle.response_complete):
            continue  # not an HTTP connection, or a request under way
        transport = getattr(connection, "transport", None)
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None and unread_bytes(sock) > 0:
            count += 1
    return count
