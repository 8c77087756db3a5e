"""``/docs`` (Swagger UI) and ``/docs/streams`` (AsyncAPI viewer) in chromium with no internet.

Every request that leaves the server's origin is recorded and aborted, as it would fail
offline: the pages must render their operations, channels and messages all the same, and must
not even try to reach another host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ridecast.events import ALL_TYPES
from tests.conftest import Server

pytestmark = pytest.mark.browser


@pytest.fixture
def offline_page(server: Server, browser: Any) -> Iterator[tuple[Any, list[str]]]:
    """A page that can reach the server's origin only; the foreign URLs it tried are listed.
    (The server first: it is set up with asyncio.run, which must not meet Playwright's loop.)"""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    foreign: list[str] = []

    def refuse(route: Any) -> None:
        foreign.append(route.request.url)
        route.abort()

    page.route(re.compile(rf"^(?!{re.escape(server.base_url)}/|data:|blob:)"), refuse)
    yield page, foreign
    context.close()


def operation_count(server: Server) -> int:
    paths = httpx.get(server.base_url + "/openapi.json").json()["paths"]
    return sum(1 for ops in paths.values() for method in ops
               if method in {"get", "post", "put", "patch", "delete"})


def test_swagger_ui_renders_every_operation_offline(
    offline_page: tuple[Any, list[str]], server: Server
) -> None:
    page, foreign = offline_page
    page.goto(server.base_url + "/docs")
    page.wait_for_selector(".opblock", timeout=20_000)
    assert page.locator(".opblock").count() == operation_count(server)
    ingest = "/api/v2/simulation/{simulation_id}/events"
    assert page.locator(".opblock-summary-path", has_text=ingest).count() >= 1
    # Expanding an operation shows its parameters and responses, all from the local document.
    page.locator(".opblock-summary", has_text="/api/v2/user/token/").first.click()
    page.wait_for_selector(".responses-wrapper", timeout=10_000)
    assert page.locator(".errors-wrapper").count() == 0  # Swagger UI parsed the document
    assert foreign == []
    assert page.errors == []


def test_redoc_renders_offline(offline_page: tuple[Any, list[str]], server: Server) -> None:
    page, foreign = offline_page
    console_errors: list[str] = []  # a load refused by the page's CSP is reported here only
    page.on("console", lambda msg: console_errors.append(msg.text) if msg.type == "error"
            else None)
    page.goto(server.base_url + "/redoc")
    page.get_by_role("heading", name="Post Events").first.wait_for(timeout=30_000)
    assert page.get_by_role("heading", name="Get Token").count() >= 1
    # The footer's logo comes from this server, and loads.
    logo = page.locator("img[alt='redocly logo']")
    logo.wait_for(timeout=10_000)
    assert logo.get_attribute("src").startswith("/docs/"), logo.get_attribute("src")
    page.wait_for_function("() => document.querySelector(\"img[alt='redocly logo']\")"
                           "?.naturalWidth > 0", timeout=10_000)
    assert foreign == []
    assert console_errors == []
    assert page.errors == []


def test_the_asyncapi_viewer_renders_channels_and_messages_offline(
    offline_page: tuple[Any, list[str]], server: Server
) -> None:
    page, foreign = offline_page
    page.goto(server.base_url + "/docs/streams")
    page.wait_for_selector("[data-testid=asyncapi][data-ready=true]", timeout=20_000)
    channels = page.eval_on_selector_all("[data-testid=channel]",
                                         "els => els.map(e => e.dataset.channel)")
    assert "/simulation_events/{simulation_id}/{type}" in channels
    assert "messaging_webhook_url" in channels
    messages = page.eval_on_selector_all("[data-testid=message]",
                                         "els => els.map(e => e.dataset.message)")
    assert sorted(messages) == sorted(ALL_TYPES)
    # A message opens on its payload's fields, nested ones included.
    page.locator("[data-message=gps_data] summary").click()
    gps = page.locator("[data-message=gps_data]")
    for name in ("message_type", "data", "lat", "lon", "vehicle_id"):
        assert gps.locator(f"[data-field={name}]").first.is_visible(), name
    # The channel's links lead to the message.
    page.locator("[data-channel='/simulation_events/{type}'] a[href='#message-assignment']"
                 ).click()
    assert page.evaluate("location.hash") == "#message-assignment"
    assert foreign == []
    assert page.errors == []


def test_docs_pages_stay_out_of_the_openapi_document_and_load_nothing_foreign(
    server: Server,
) -> None:
    paths = httpx.get(server.base_url + "/openapi.json").json()["paths"]
    assert not any(p.startswith("/docs") for p in paths)
    for page in ("/docs", "/redoc", "/docs/streams"):
        response = httpx.get(server.base_url + page)
        assert response.status_code == 200
        assert "script-src 'self'" in response.headers["content-security-policy"]
        sources = re.findall(r'(?:src|href)="([^"]+)"', response.text)
        assert sources and all(s.startswith("/") for s in sources), sources
        for source in sources:
            assert httpx.get(server.base_url + source).status_code == 200, source
