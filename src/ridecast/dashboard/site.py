"""Serves the dashboard: ``GET /`` (the page), ``/dashboard/...`` (its static assets) and
``/dashboard/networks/{name}.json`` (a bundled road network's streets, see ``roads.py``).

The page is ``static/index.html`` with the few server settings it needs (tile URL and
attribution, when to draw the road network, version) inlined as a JSON ``<script>`` block, so
that it needs no extra request and no build step. Routes are added with explicit paths, never
a catch-all mount at ``/``: the API, ``/docs``, ``/metrics`` and the ``/simulation_events/...``
websockets stay untouched whatever order the routers are included in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from .. import __version__
from ..config import Settings
from ..errors import NotFound
from .roads import bundled_network_json

STATIC_DIR = Path(__file__).parent / "static"
"""The dashboard's files, shipped inside the package."""

ASSET_PREFIX = "/dashboard"
"""URL prefix of the static assets (``/dashboard/js/main.js``...)."""

CONFIG_PLACEHOLDER = "<!--ridecast:config-->"

# The page only ever talks to its own origin (REST and websocket); tiles may come from any
# configured server. Inline styles stay allowed because Leaflet positions its layers with
# style attributes. frame-ancestors: the page holds an API key, so it must not be framed.
CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob: https: http:",
    "connect-src 'self' ws: wss:",
    "object-src 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
))

PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def page_config(settings: Settings) -> dict[str, Any]:
    """What the page needs from the server's settings."""
    return {
        "tile_url": settings.tile_url,
        "tile_attribution": settings.tile_attribution,
        "map_roads": settings.map_roads,
        "version": __version__,
        "asset_prefix": ASSET_PREFIX,
    }


def script_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survives.

    The escapes are JSON's own (``\\u003c``), so ``JSON.parse`` of the element's text gives
    ``value`` back while ``</script>`` or ``<!--`` can never appear in the markup.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def render_index(template: str, config: dict[str, Any]) -> str:
    """The page with ``config`` inlined where the template has its placeholder."""
    if CONFIG_PLACEHOLDER not in template:
        raise ValueError(f"the dashboard template lacks {CONFIG_PLACEHOLDER}")
    block = (
        '<script type="application/json" id="ridecast-config">'
        f"{script_json(config)}</script>"
    )
    return template.replace(CONFIG_PLACEHOLDER, block, 1)


class _Assets(StaticFiles):
    """Static files that browsers revalidate (ETag) instead of caching blindly, so that an
    upgraded ridecast never runs a stale mix of old and new modules."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.setdefault("Cache-Control", "no-cache")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response


def mount_dashboard(app: FastAPI, settings: Settings) -> None:
    """Add ``GET /`` and the ``/dashboard`` assets to ``app``."""
    page = render_index((STATIC_DIR / "index.html").read_text(encoding="utf-8"),
                        page_config(settings))

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    def network(request: Request) -> Response:
        # Sync on purpose: the first answer is built in Starlette's thread pool (seconds of
        # CPU for the bundled network), never on the event loop; later ones are cached.
        name = str(request.path_params["name"])
        try:
            body = bundled_network_json(name)
        except KeyError:
            raise NotFound(f"no bundled road network named {name!r}") from None
        return Response(body, media_type="application/json", headers={
            "Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})

    app.add_route("/", index, methods=["GET", "HEAD"], include_in_schema=False)
    # Before the assets' mount, which would otherwise answer this path with a 404.
    app.add_route(ASSET_PREFIX + "/networks/{name}.json", network, methods=["GET", "HEAD"],
                  include_in_schema=False)
    app.mount(ASSET_PREFIX, _Assets(directory=STATIC_DIR), name="dashboard")
