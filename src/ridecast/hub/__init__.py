"""The websocket hub: paths, subscription index, per-connection queues, resume.

``app.py`` builds the process's ``Hub`` and, when ``RIDECAST_WS_PORT`` is set, opens its
dedicated listener with ``open_dedicated_listener``; the main HTTP port serves the same paths
through ``asgi.py``; on both, connections are ``StreamProtocol`` (``protocol.py``).
"""

from __future__ import annotations

import ssl

from ..config import Settings
from .asgi import ShutdownFirstServer, websocket_routes
from .hub import Hub
from .listener import start_listener
from .paths import Route, parse_path


async def open_dedicated_listener(hub: Hub, settings: Settings) -> None:
    """Serve ``hub`` on ``RIDECAST_WS_HOST:RIDECAST_WS_PORT`` too (with TLS when configured)."""
    if settings.ws_port is None:
        return
    tls = None
    if settings.tls_cert_file and settings.tls_key_file:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    try:
        hub.listener = await start_listener(
            hub, settings.ws_host, settings.ws_port, tls=tls,
            handshake_timeout_s=settings.http_idle_timeout_s)
    except OSError as exc:
        # The port is the operator's to fix: say which setting, not only asyncio's words.
        raise OSError(
            exc.errno, f"cannot listen for websockets on {settings.ws_host}:{settings.ws_port} "
            f"(RIDECAST_WS_HOST, RIDECAST_WS_PORT): {exc.strerror or exc}; stop what holds "
            "the port or choose another",
        ) from exc


__all__ = [
    "Hub", "Route", "ShutdownFirstServer", "open_dedicated_listener", "parse_path",
    "websocket_routes",
]
