"""The websocket paths on the main HTTP port: a raw ASGI endpoint under uvicorn.

Clients use one base URL, so ``/simulation_events/...`` must work on the API's own port.

Delivery takes the same path as on the dedicated port. ``ridecast serve`` runs uvicorn with
``DirectWebSocketProtocol`` (its ``websockets-sansio`` protocol, which hands itself to the
endpoint in the scope); once the handshake is accepted, a stream writes its frames straight
into that connection's ``websockets`` protocol object and flushes them with one
``transport.write`` per bus batch, honouring the transport's flow control (``DirectSink``).
There is no ASGI message, no bytes-to-str conversion and no task per frame. Under any other
server the stream falls back to ASGI ``websocket.send`` messages (``AsgiSink``), correct but
slower; ``ridecast_ws_direct_streams_total`` counts the direct ones.

``ShutdownFirstServer`` makes uvicorn let the hub close every stream with 1001 before it
closes the connections itself (with 1012).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from starlette.routing import WebSocketRoute
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from ..metrics import WS_DIRECT_STREAMS
from .hub import Hub


class AsgiSink:
    """An accepted ASGI websocket as a ``Sink``: every frame goes through ``send``."""

    __slots__ = ("_closed", "_receive", "_send")

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._closed = False

    def writable(self) -> bool:
        # ASGI has no synchronous write: every frame takes the queued path.
        return False

    def write(self, frame: bytes) -> None:  # pragma: no cover - never writable
        raise RuntimeError("an ASGI websocket has no synchronous write")

    def flush(self) -> None:  # pragma: no cover - never writable
        return None

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


class DirectSink(AsgiSink):
    """An accepted websocket of uvicorn's ``websockets-sansio`` protocol, written directly.

    ``proto`` is the uvicorn protocol object behind the ASGI ``send`` callable: frames go
    into its ``websockets`` ``ServerProtocol`` (``conn``) and out through its ``transport``,
    exactly as the dedicated listener does. Closing still goes through ASGI, so uvicorn
    keeps its own bookkeeping of the close handshake.
    """

    __slots__ = ("_conn", "_proto", "_transport")

    def __init__(self, receive: Receive, send: Send, proto: Any) -> None:
        super().__init__(receive, send)
        self._proto = proto
        self._conn = proto.conn
        self._transport = proto.transport

    def writable(self) -> bool:
        proto = self._proto
        return bool(proto.writable.is_set() and not proto.close_sent
                    and not proto.disconnected and not self._transport.is_closing())

    def write(self, frame: bytes) -> None:
        self._conn.send_text(frame)

    def flush(self) -> None:
        data = self._conn.data_to_send()
        if data and not self._transport.is_closing():
            self._transport.write(b"".join(data))

    async def send(self, frame: bytes) -> None:
        await self.wait_writable()
        self.write(frame)
        self.flush()

    @property
    def can_wait(self) -> bool:
        return True

    async def wait_writable(self) -> None:
        proto = self._proto
        await proto.writable.wait()
        if proto.close_sent or proto.disconnected or self._transport.is_closing():
            raise ConnectionError("the websocket is closed")


SCOPE_KEY = "ridecast.ws_protocol"
"""Scope key under which ``DirectWebSocketProtocol`` hands itself to the endpoint."""

STREAMS_PREFIX = "/simulation_events"

HubSource = Callable[[], "Hub | None"]
"""Where the endpoint finds the hub: it is built in the app's lifespan, after the routes."""


class DirectWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's ``websockets-sansio`` protocol, with the stream paths served directly.

    A connection to ``/simulation_events...`` goes straight to ``StreamsEndpoint``, past the
    HTTP middleware and router (which have nothing to do for a stream, and whose coroutine
    frames would otherwise stay alive as long as it is open), and the protocol object
    travels in the scope (``SCOPE_KEY``) so that ``DirectSink`` writes through it. Other
    websocket paths take the application as usual. Build it with ``direct_protocol``.
    """

    streams: StreamsEndpoint | None = None

    async def run_asgi(self) -> None:
        self.scope[SCOPE_KEY] = self  # type: ignore[literal-required]
        if self.streams is not None and self.scope["path"].startswith(STREAMS_PREFIX):
            self.app = self.streams  # this connection only (an instance attribute)
        await super().run_asgi()


def direct_protocol(hub: HubSource) -> type[DirectWebSocketProtocol]:
    """The protocol class for uvicorn's ``ws=``, serving streams with the hub of ``hub()``."""
    return type("RidecastWebSocketProtocol", (DirectWebSocketProtocol,),
                {"streams": StreamsEndpoint(hub)})


def _direct_protocol(scope: Scope) -> Any | None:
    """The protocol of ``DirectWebSocketProtocol`` behind this connection, when it is one."""
    proto = scope.get(SCOPE_KEY)
    return proto if isinstance(proto, WebSocketsSansIOProtocol) else None


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
        proto = _direct_protocol(scope)

        async def accept() -> None:
            await send({"type": "websocket.accept"})
            if proto is not None:
                # Read once, kept for the life of the stream otherwise: the handshake's
                # request and response and the request headers (a few KiB per stream).
                proto.request = proto.response = None
                scope["headers"] = []

        sink = AsgiSink(receive, send) if proto is None else DirectSink(receive, send, proto)
        if proto is not None:
            WS_DIRECT_STREAMS.inc()
        await hub.serve(sink, scope["path"], _first(query, "token"), header,
                        _first(query, "since"), accept)


def websocket_routes(hub: HubSource) -> list[WebSocketRoute]:
    """Routes to add to the application: every path under ``/simulation_events`` (used
    when the server is not run with ``direct_protocol``, e.g. under another ASGI server)."""
    # Starlette wraps a plain function as a WebSocket session; an object is used as ASGI.
    return [WebSocketRoute(STREAMS_PREFIX + "{rest:path}", StreamsEndpoint(hub))]


class ShutdownFirstServer(uvicorn.Server):
    """uvicorn, except that websocket streams are closed with 1001 before anything else."""

    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: Any = None) -> None:
        hub = getattr(self._app.state, "hub", None)
        if hub is not None:
            await hub.close()
        await super().shutdown(sockets=sockets)
