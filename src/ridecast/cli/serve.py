"""``ridecast serve``: the API, websocket streams, webhook workers and simulators."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer


def run_server(
    host: str, port: int, *, tls_cert: Path | None = None, tls_key: Path | None = None
) -> None:
    """Serve ``create_app()`` with uvicorn until SIGINT/SIGTERM (blocking)."""
    import uvicorn

    from ..app import create_app
    from ..config import get_settings

    settings = get_settings()
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from ..hub import ShutdownFirstServer

    app = create_app(settings)
    # uvicorn.run, except that the hub closes its streams with 1001 before uvicorn's
    # own shutdown closes websockets with 1012.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=settings.log_level,
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        ws="websockets",
        ws_ping_interval=settings.ws_ping_interval_s,
        ws_ping_timeout=settings.ws_ping_interval_s,
        timeout_graceful_shutdown=5,
        lifespan="on",
    )
    ShutdownFirstServer(config, app).run()


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate: serve https and wss.", exists=True)
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key.", exists=True)] = None,
) -> None:
    """Start the server: HTTP API, websocket streams, webhooks (configure with RIDECAST_*)."""
    if (tls_cert is None) != (tls_key is None):
        raise typer.BadParameter("--tls-cert and --tls-key go together")
    run_server(host, port, tls_cert=tls_cert, tls_key=tls_key)
