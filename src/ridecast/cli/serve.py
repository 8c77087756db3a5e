"""``ridecast serve``: the API, websocket streams, webhook workers and simulators."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    import uvicorn

    from ..config import Settings

from .netcheck import port_free
from .process import exit_despite_lingering_threads


def ready_line(base: str, ws_port: int | None, scheme: str) -> str:
    """The one line that says the server is up and where everything is."""
    ws = "wss" if scheme == "https" else "ws"
    streams = (f"{ws}://{base.split('://', 1)[1].rsplit(':', 1)[0]}:{ws_port}" if ws_port
               else ws + base.removeprefix(scheme))
    return (f"ridecast ready: API {base}/api/v2 · docs {base}/docs · dashboard {base}/ · "
            f"streams {streams}/simulation_events/ID · health {base}/healthz")


def uvicorn_config(app: Any, settings: Settings, host: str, port: int,
                   **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for ridecast's app, the same for ``serve`` and ``demo``:
    plain ingest requests are run without uvicorn's request cycle (api/direct_http.py),
    streams on the main port are handed to the hub's own connection handler at the upgrade
    (hub/asgi.py), and the hub closes them with 1001 before uvicorn's shutdown would."""
    import uvicorn

    from ..api.direct_http import ingest_http_protocol
    from ..api.http_guard import HttpBounds
    from ..hub.asgi import direct_protocol

    bounds = HttpBounds(max_header_bytes=settings.max_header_bytes,
                        header_timeout_s=settings.http_header_timeout_s,
                        idle_timeout_s=settings.http_idle_timeout_s,
                        body_timeout_s=settings.http_body_timeout_s)

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        # Plain ingest requests skip uvicorn's request cycle (api/direct_http.py); every
        # connection has a bounded head and timers (api/http_guard.py).
        http=ingest_http_protocol(settings.max_body_bytes, bounds,
                                  direct=settings.direct_ingest),
        timeout_keep_alive=max(1, round(settings.http_idle_timeout_s)),
        ws=direct_protocol(lambda: getattr(app.state, "hub", None)),
        # No permessage-deflate, as on the dedicated port: browsers and the websockets
        # client offer it, and accepting would compress every frame once per connection
        # (defeating encode-once) and hold a zlib context of tens of KiB per stream.
        ws_per_message_deflate=False,
        ws_ping_interval=settings.ws_ping_interval_s,
        ws_ping_timeout=settings.ws_ping_interval_s,
        # X-Forwarded-For decides the client address that the failed-authentication
        # throttle counts: believed only from the proxies an operator names (uvicorn's own
        # default trusts loopback, so one local client could pose as any address).
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=list(settings.trusted_proxies),
        timeout_graceful_shutdown=5,
        lifespan="on",
        # Off unless asked for (RIDECAST_ACCESS_LOG): one line per request costs more than
        # handling an ingest request does.
        **{"access_log": settings.access_log, **options},
    )


def run_server(
    host: str, port: int, *, tls_cert: Path | None = None, tls_key: Path | None = None,
    no_workers: bool = False, no_simulator: bool = False,
) -> None:
    """Serve ``create_app()`` with uvicorn until SIGINT/SIGTERM (blocking)."""
    from ..app import create_app
    from ..config import get_settings
    from .datadir import prepare_store

    settings = get_settings()
    if no_workers:  # an API node: `ridecast worker` processes deliver the webhooks
        settings = settings.model_copy(update={"webhook_workers": False})
    if no_simulator:  # an API node: `ridecast simulator` processes run the simulations
        settings = settings.model_copy(update={"simulator_host": False})
    if tls_cert is not None and tls_key is not None:
        # In the settings, so the dedicated websocket listener serves wss too.
        settings = settings.model_copy(
            update={"tls_cert_file": str(tls_cert), "tls_key_file": str(tls_key)}
        )
    if (settings.tls_cert_file is None) != (settings.tls_key_file is None):
        raise SystemExit("RIDECAST_TLS_CERT_FILE and RIDECAST_TLS_KEY_FILE go together")
    # Before anything is migrated or opened: a busy port is one line, not a traceback.
    if not port_free(host, port):
        raise SystemExit(
            f"ridecast serve: {host}:{port} is in use (another ridecast?); "
            "stop it or pick another port with --port"
        )
    if settings.ws_port is not None and not port_free(settings.ws_host, settings.ws_port):
        raise SystemExit(
            f"ridecast serve: {settings.ws_host}:{settings.ws_port} (RIDECAST_WS_PORT) is in "
            "use; stop what holds it or set another RIDECAST_WS_PORT"
        )
    prepare_store(settings)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from ..hub.asgi import ShutdownFirstServer

    app = create_app(settings)
    config = uvicorn_config(app, settings, host, port, log_level=settings.log_level,
                            ssl_certfile=settings.tls_cert_file,
                            ssl_keyfile=settings.tls_key_file)
    scheme = "https" if settings.tls_cert_file else "http"
    base = f"{scheme}://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"

    class AnnouncingServer(ShutdownFirstServer):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                print(ready_line(base, settings.ws_port, scheme), file=sys.stderr, flush=True)

    # After uvicorn.Config, which installs uvicorn's logging configuration.
    from .. import logredact
    from . import fdlimit, gctuning, startlog

    logredact.install()
    startlog.install(settings.log_level)
    fdlimit.raise_to_hard()
    gctuning.tune()
    AnnouncingServer(config, app, handshake_timeout_s=settings.http_idle_timeout_s).run()
    exit_despite_lingering_threads()


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate: serve https and wss.", exists=True)
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key.", exists=True)] = None,
    no_workers: Annotated[bool, typer.Option(
        "--no-workers", help="Deliver no webhooks here (same as RIDECAST_WEBHOOK_WORKERS=false): "
        "an API node of a cluster whose `ridecast worker` processes deliver them.")] = False,
    no_simulator: Annotated[bool, typer.Option(
        "--no-simulator", help="Run no simulator run here (same as "
        "RIDECAST_SIMULATOR_HOST=false): an API node of a cluster whose `ridecast simulator` "
        "processes run them.")] = False,
) -> None:
    """Start the server: HTTP API, websocket streams, webhooks (configure with RIDECAST_*)."""
    if (tls_cert is None) != (tls_key is None):
        raise typer.BadParameter("--tls-cert and --tls-key go together")
    run_server(host, port, tls_cert=tls_cert, tls_key=tls_key, no_workers=no_workers,
               no_simulator=no_simulator)


def migrate() -> None:
    """Bring the database of RIDECAST_DATABASE_URL to the current schema, then exit.

    `serve` and `worker` do this too at start (under a lock, so nodes started together take
    turns); run it first when deploying a new version to a cluster.
    """
    import asyncio

    from ..config import get_settings
    from ..store.engine import upgrade

    url = get_settings().database_url
    asyncio.run(upgrade(url))
    typer.echo(f"database at {url.split('@')[-1]} is at the current schema")
