"""After a websocket upgrade on the HTTP port, nothing keeps the HTTP protocol alive
(issue 53): not the guard's timer, not the parser's cycle back to it. An idle stream on the
default port then costs what one on the dedicated port does, not that plus a spent HTTP
protocol with its parser and buffers.

A real uvicorn server runs in this process (so that the protocol objects can be watched),
with ridecast's guarded protocol and uvicorn's own websocket protocol; a real client
connects.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import uvicorn
import websockets

from ridecast.api.direct_http import ingest_http_protocol
from ridecast.api.http_guard import HttpBounds
from tests.waiting import eventually_async


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    assert scope["type"] == "websocket"
    await receive()
    await send({"type": "websocket.accept"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


def test_the_http_protocol_is_freed_at_the_upgrade() -> None:
    """The spent HTTP protocol is freed by reference counting alone, at once."""
    base = ingest_http_protocol(1 << 20, HttpBounds(idle_timeout_s=60, header_timeout_s=60))
    made: list[weakref.ref[Any]] = []

    class Watched(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:
            made.append(weakref.ref(self))
            super().connection_made(transport)

    async def scenario() -> None:
        config = uvicorn.Config(_app, host="127.0.0.1", port=0, http=Watched,
                                ws="websockets-sansio", log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())

        def started() -> bool:
            if task.done():
                task.result()  # raises what stopped it
            return server.started

        await eventually_async(started, step=0.01, what="uvicorn started")
        port = server.servers[0].sockets[0].getsockname()[1]
        gc.disable()  # only reference counting may free it
        try:
            async with websockets.connect(f"ws://127.0.0.1:{port}/stream") as ws:
                await ws.ping()
                assert len(made) == 1
                assert made[0]() is None, "the HTTP protocol outlives the upgrade"
        finally:
            gc.enable()
            server.should_exit = True
            await task

    asyncio.run(scenario())
