"""Offline API documentation: ``/docs`` (Swagger UI), ``/redoc`` (ReDoc) and ``/docs/streams``
(an AsyncAPI viewer).

FastAPI's own ``/docs`` and ``/redoc`` load their scripts from a CDN, so they are blank pages
without internet. ``install_docs_pages(app)`` replaces them: Swagger UI's and ReDoc's files come
from the ``fastapi-offline`` package (installed with ridecast), served under
``/docs/assets/``, and our small init script and the AsyncAPI viewer under ``/docs/static/``.
Nothing on these pages loads from another origin, so they work offline and under a strict
Content-Security-Policy (no inline script). ReDoc's bundle names one remote file, the small
logo of its "API docs by Redocly" footer: ``/docs/assets/redoc.standalone.js`` is served with
that address rewritten to a local icon (``docs_static/redoc-logo.svg``; Redocly's own logo is
in no package we install), so the page neither loads it from a CDN nor has the CSP refuse it.

``/docs/streams`` renders ``/asyncapi.json`` (the websocket channels and the 18 event messages
with their payload fields) in the browser. The pages are HTML, so, as ``/docs`` always was,
they are left out of the OpenAPI document.
"""

from __future__ import annotations

import html
from importlib.util import find_spec
from pathlib import Path

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

DOCS_PATH = "/docs"
REDOC_PATH = "/redoc"
STREAMS_PATH = "/docs/streams"
ASSETS_PATH = "/docs/assets"
STATIC_PATH = "/docs/static"
OWN_STATIC_DIR = Path(__file__).parent / "docs_static"
REDOC_BUNDLE = "redoc.standalone.js"
#: The one remote address in ReDoc's bundle (its footer's logo), and what replaces it.
REDOC_REMOTE_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
REDOC_LOCAL_LOGO = f"{STATIC_PATH}/redoc-logo.svg"

CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",  # Swagger UI sets style attributes
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
))
# ReDoc runs its search in a worker made from a blob: URL.
REDOC_HEADERS_CSP = CONTENT_SECURITY_POLICY + "; worker-src 'self' blob:"
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
REDOC_HEADERS = {**PAGE_HEADERS, "Content-Security-Policy": REDOC_HEADERS_CSP}


def swagger_ui_dir() -> Path:
    """The folder of Swagger UI's files inside the installed ``fastapi-offline`` package."""
    spec = find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("the fastapi-offline package (Swagger UI's files) is not installed; "
                           "reinstall ridecast")
    return Path(spec.origin).parent / "static"


def _page(title: str, stylesheets: tuple[str, ...], body_attrs: str, body: str) -> str:
    """An HTML page of the docs: every asset from this server (no CDN)."""
    links = "".join(f'<link rel="stylesheet" href="{href}">\n' for href in stylesheets)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="icon" href="{ASSETS_PATH}/favicon.png">
{links}</head>
<body{body_attrs}>
{body}</body>
</html>
"""


def _nav(title: str, current: str, document: str) -> str:
    """The bar linking the docs pages; ``current`` is the path of this one."""
    links = [(DOCS_PATH, "REST API"),
             (STREAMS_PATH, "Websocket streams and webhooks (AsyncAPI)")]
    here = ' aria-current="page"'
    items = "".join(f'  <a href="{href}"{here if href == current else ""}>{label}</a>\n'
                    for href, label in links)
    name = html.escape(document)
    return (f'<nav class="rc-docs-nav">\n  <strong>{html.escape(title)}</strong>\n{items}'
            f'  <a href="{name}">{name.rsplit("/", 1)[-1]}</a>\n  <a href="/">dashboard</a>\n'
            "</nav>\n")


def swagger_page(openapi_url: str, title: str) -> str:
    """The Swagger UI page: assets and init script from this server only."""
    return _page(
        f"{title} API", (f"{ASSETS_PATH}/swagger-ui.css", f"{STATIC_PATH}/docs.css"),
        f' data-openapi-url="{html.escape(openapi_url)}"',
        _nav(title, DOCS_PATH, openapi_url)
        + '<div id="swagger-ui"></div>\n'
        f'<script src="{ASSETS_PATH}/swagger-ui-bundle.js"></script>\n'
        f'<script src="{STATIC_PATH}/swagger-init.js"></script>\n',
    )


def redoc_page(openapi_url: str, title: str) -> str:
    """The ReDoc page (no web fonts: ReDoc falls back to the system's)."""
    return _page(
        f"{title} API", (f"{STATIC_PATH}/docs.css",), "",
        f'<redoc spec-url="{html.escape(openapi_url)}"></redoc>\n'
        f'<script src="{ASSETS_PATH}/redoc.standalone.js"></script>\n',
    )


def streams_page(title: str) -> str:
    """The AsyncAPI viewer's page; ``asyncapi.js`` fills it from ``/asyncapi.json``."""
    return _page(
        f"{title} streams and webhooks", (f"{STATIC_PATH}/docs.css", f"{STATIC_PATH}/asyncapi.css"),
        ' data-asyncapi-url="/asyncapi.json"',
        _nav(title, STREAMS_PATH, "/asyncapi.json")
        + '<main id="asyncapi" data-testid="asyncapi"><p>Loading /asyncapi.json…</p></main>\n'
        f'<script src="{STATIC_PATH}/asyncapi.js"></script>\n',
    )


def redoc_bundle(assets: Path) -> bytes:
    """ReDoc's bundle from ``assets``, its footer's remote logo pointed at the local one."""
    bundle = (assets / REDOC_BUNDLE).read_bytes()
    return bundle.replace(REDOC_REMOTE_LOGO.encode(), REDOC_LOCAL_LOGO.encode())


class _Assets(StaticFiles):
    """Static files with ``nosniff``, revalidated by browsers (ETag) after an upgrade."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.setdefault("Cache-Control", "no-cache")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response


def _is_cdn_docs_route(route: BaseRoute) -> bool:
    return isinstance(route, Route) and route.path in (
        DOCS_PATH, f"{DOCS_PATH}/oauth2-redirect", REDOC_PATH)


def install_docs_pages(app: FastAPI) -> None:
    """Replace FastAPI's CDN-backed docs routes of ``app`` with the offline pages."""
    app.router.routes[:] = [r for r in app.router.routes if not _is_cdn_docs_route(r)]
    openapi_url = app.openapi_url or "/openapi.json"
    swagger = swagger_page(openapi_url, app.title)
    redoc = redoc_page(openapi_url, app.title)
    streams = streams_page(app.title)

    async def docs(request: Request) -> Response:
        return HTMLResponse(swagger, headers=PAGE_HEADERS)

    async def redoc_docs(request: Request) -> Response:
        return HTMLResponse(redoc, headers=REDOC_HEADERS)

    async def streams_docs(request: Request) -> Response:
        return HTMLResponse(streams, headers=PAGE_HEADERS)

    app.add_route(DOCS_PATH, docs, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_route(REDOC_PATH, redoc_docs, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_route(STREAMS_PATH, streams_docs, methods=["GET", "HEAD"], include_in_schema=False)
    assets = swagger_ui_dir()
    bundle: list[bytes] = []  # read on first use (1 MB): most processes never serve it

    async def redoc_js(request: Request) -> Response:
        if not bundle:
            bundle.append(redoc_bundle(assets))
        return Response(bundle[0], media_type="text/javascript", headers={
            "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    # Before the mount of the other assets, which it would otherwise serve unchanged.
    app.add_route(f"{ASSETS_PATH}/{REDOC_BUNDLE}", redoc_js, methods=["GET", "HEAD"],
                  include_in_schema=False)
    app.mount(ASSETS_PATH, _Assets(directory=assets), name="docs-assets")
    app.mount(STATIC_PATH, _Assets(directory=OWN_STATIC_DIR), name="docs-static")
