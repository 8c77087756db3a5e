"""The dedicated websocket listener: streams on their own port (``RIDECAST_WS_PORT``).

Same process, same event loop and same ``Hub`` as the HTTP port, and the same connection
handler, ``StreamProtocol`` (``protocol.py``): an asyncio server of it, with TLS when
configured. Every path is taken to the hub, which refuses what is not a stream path with
a close code after the handshake.
"""

from __future__ import annotations

import asyncio
import ssl

from .hub import Hub
from .protocol import StreamProtocol

BACKLOG = 2048
"""Pending connections the kernel queues for ``accept`` (as uvicorn's default)."""


async def start_listener(
    hub: Hub, host: str, port: int, *, tls: ssl.SSLContext | None = None,
    handshake_timeout_s: float | None = None,
) -> asyncio.Server:
    """Listen on ``host:port`` for the websocket paths; ``server.close()`` stops it.

    Keepalive pings follow ``hub.keepalive`` (RIDECAST_WS_PING_INTERVAL_S).
    """
    loop = asyncio.get_running_loop()
    # asyncio's default backlog (100) drops SYNs when hundreds of clients connect at once
    # (after a restart, say), each retried a second later; uvicorn's default is 2048.
    if tls is None:
        return await loop.create_server(lambda: StreamProtocol(hub), host, port,
                                        backlog=BACKLOG)
    # A client that never finishes its TLS handshake is dropped as an idle one is.
    return await loop.create_server(lambda: StreamProtocol(hub), host, port, ssl=tls,
                                    backlog=BACKLOG,
                                    ssl_handshake_timeout=handshake_timeout_s)
