"""The websocket hub: paths, subscription index, per-connection queues, resume.

``start_hub(runtime)`` builds the process's ``Hub`` and, when ``RIDECAST_WS_PORT`` is set,
its dedicated listener; the main HTTP port serves the same paths through ``asgi.py``.
"""

from __future__ import annotations

import ssl

from ..runtime import Runtime
from .asgi import ShutdownFirstServer, websocket_routes
from .hub import Hub
from .listener import start_listener
from .paths import Route, parse_path


async def start_hub(runtime: Runtime) -> Hub:
    """The hub of ``runtime``, registered as ``runtime.components["hub"]``."""
    hub = Hub(runtime)
    settings = runtime.settings
    if settings.ws_port is not None:
        tls = None
        if settings.tls_cert_file and settings.tls_key_file:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
        hub.listener = await start_listener(
            hub, settings.ws_host, settings.ws_port, ping_interval=settings.ws_ping_interval_s,
            tls=tls,
        )
    runtime.components["hub"] = hub
    return hub


__all__ = [
    "Hub", "Route", "ShutdownFirstServer", "parse_path", "start_hub", "websocket_routes",
]
