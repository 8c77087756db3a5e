"""The websocket paths on the main HTTP port: a raw ASGI endpoint under uvicorn.

Clients use one base URL, so ``/simulation_events/...`` must work on the API's own port.
The endpoint is raw ASGI rather than a Starlette ``WebSocket`` to keep per-frame work to one
``websocket.send`` message. ``ShutdownFirstServer`` makes uvicorn let the hub close every
stream with 1001 before it closes the connections itself (with 1012).
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from starlette.routing import WebSocketRoute
from starlette.types import Receive, Scope, Send

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


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


async def simulation_events(scope: Scope, receive: Receive, send: Send) -> None:
    """ASGI app of every ``/simulation_events...`` path: the hub authorises and subscribes,
    then the handshake is accepted (refusals are close frames after it)."""
    message = await receive()
    if message["type"] != "websocket.connect":  # pragma: no cover - ASGI guarantees it
        return
    hub: Hub = scope["app"].state.hub
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    header = None
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            header = value.decode("latin-1")
            break

    async def accept() -> None:
        await send({"type": "websocket.accept"})

    await hub.serve(
        AsgiSink(receive, send), scope["path"], _first(query, "token"), header,
        _first(query, "since"), accept,
    )


def websocket_routes() -> list[WebSocketRoute]:
    """Routes to add to the application: every path under ``/simulation_events``."""
    # Starlette wraps a plain function as a WebSocket session; an object is used as ASGI.
    return [WebSocketRoute("/simulation_events{rest:path}", _RawAsgi())]


class _RawAsgi:
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await simulation_events(scope, receive, send)


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
