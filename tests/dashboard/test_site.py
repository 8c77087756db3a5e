"""The dashboard's HTTP side: the page, its inlined settings, its assets, what it leaves alone."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.sync.client import connect

from ridecast.api.docs_pages import REDOC_LOCAL_LOGO, REDOC_REMOTE_LOGO
from ridecast.config import Settings
from ridecast.dashboard import STATIC_DIR, page_config, render_index
from ridecast.dashboard.site import CONFIG_PLACEHOLDER, script_json
from tests.conftest import Server

CONFIG_RE = re.compile(r'<script type="application/json" id="ridecast-config">(.*?)</script>', re.S)


def inlined_config(html: str) -> dict[str, object]:
    match = CONFIG_RE.search(html)
    assert match, "the page has no inlined config"
    config: dict[str, object] = json.loads(match.group(1))
    return config


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
))
def test_inlined_json_cannot_leave_its_script_element(value: object) -> None:
    """Any value inlines as JSON that parses back to itself and holds no markup at all."""
    text = script_json(value)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == value


@given(st.text())
def test_any_tile_settings_render_a_well_formed_page(tile_url: str) -> None:
    """A hostile tile URL setting still gives one config block that reads back exactly."""
    template = (STATIC_DIR / "index.html").read_text()
    settings = Settings(tile_url=tile_url, tile_attribution=tile_url)
    html = render_index(template, page_config(settings))
    assert CONFIG_PLACEHOLDER not in html
    assert html.count("</script>") == template.count("</script>") + 1
    assert inlined_config(html)["tile_url"] == tile_url


def test_page_is_served_at_root_with_strict_headers(server: Server) -> None:
    """GET / is the dashboard, with a CSP that keeps scripts and connections same-origin."""
    response = httpx.get(server.base_url + "/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    config = inlined_config(response.text)
    assert config["tile_url"] == Settings().tile_url
    for testid in ("login-form", "map", "event-feed", "kpi-panel", "webhook-panel"):
        assert f'data-testid="{testid}"' in response.text


@pytest.mark.parametrize(("path", "kind"), [
    ("/dashboard/js/main.js", "javascript"),
    ("/dashboard/css/dashboard.css", "text/css"),
    ("/dashboard/vendor/leaflet/leaflet.js", "javascript"),
    ("/dashboard/vendor/leaflet/images/marker-icon.png", "image/png"),
    ("/dashboard/favicon.svg", "image/svg+xml"),
])
def test_assets_are_served_with_their_types(server: Server, path: str, kind: str) -> None:
    """Every asset the page loads is there, typed, and revalidated rather than cached blind."""
    response = httpx.get(server.base_url + path)
    assert response.status_code == 200
    assert kind in response.headers["content-type"]
    assert response.headers["cache-control"] == "no-cache"


def test_every_module_the_page_imports_exists(server: Server) -> None:
    """Each relative ES module import resolves to a served file (no build step hides one)."""
    for module in sorted((STATIC_DIR / "js").glob("*.js")):
        for name in re.findall(r'from "\./([\w.]+)"', module.read_text()):
            assert (STATIC_DIR / "js" / name).is_file(), f"{module.name} imports {name}"
            assert httpx.get(f"{server.base_url}/dashboard/js/{name}").status_code == 200


def test_api_and_streams_still_answer_beside_the_dashboard(server: Server) -> None:
    """Mounting the dashboard leaves the API, docs, metrics and websocket paths working."""
    for path in ("/healthz", "/openapi.json", "/docs", "/asyncapi.json", "/metrics"):
        assert httpx.get(server.base_url + path).status_code == 200, path
    assert httpx.get(server.base_url + "/api/v2/simulation").status_code == 401
    assert httpx.get(server.base_url + "/dashboard/nope.js").status_code == 404
    user = server.create_user()
    sim = server.create_simulation(user)
    token = server.token(user)
    with connect(f"{server.ws_url}/simulation_events/{sim}?token={token}") as ws:
        with server.client(user) as http:
            http.post(f"/api/v2/simulation/{sim}/events", json={
                "agent_type": "vehicle", "message_type": "vehicle_use",
                "data": {"vehicle_id": 1, "action": "disabled"},
                "current_sim_ts": "2026-11-22T03:00:00+00:00", "transmit_to_websocket": True,
            }).raise_for_status()
        frame = json.loads(ws.recv(timeout=10))
    assert frame["message_type"] == "vehicle_use"


def test_redoc_bundle_is_served_with_its_footer_logo_local(server: Server) -> None:
    """ReDoc's one remote file (its footer's logo) is rewritten to an icon this server has,
    so /redoc loads nothing from another host and its CSP refuses nothing."""
    bundle = httpx.get(server.base_url + "/docs/assets/redoc.standalone.js")
    assert bundle.status_code == 200
    assert "javascript" in bundle.headers["content-type"]
    assert bundle.headers["x-content-type-options"] == "nosniff"
    assert REDOC_REMOTE_LOGO not in bundle.text and REDOC_LOCAL_LOGO in bundle.text
    logo = httpx.get(server.base_url + REDOC_LOCAL_LOGO)
    assert logo.status_code == 200 and logo.headers["content-type"] == "image/svg+xml"
    assert httpx.get(server.base_url + "/docs/assets/swagger-ui.css").status_code == 200


def test_tile_url_comes_from_the_environment(start_server: Callable[..., Server]) -> None:
    """RIDECAST_TILE_URL and RIDECAST_TILE_ATTRIBUTION reach the page."""
    srv = start_server({"RIDECAST_TILE_URL": "http://127.0.0.1:9/t/{z}/{x}/{y}.png",
                        "RIDECAST_TILE_ATTRIBUTION": "tiles <local>"})
    config = inlined_config(httpx.get(srv.base_url + "/").text)
    assert config["tile_url"] == "http://127.0.0.1:9/t/{z}/{x}/{y}.png"
    assert config["tile_attribution"] == "tiles <local>"
