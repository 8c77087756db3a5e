"""The map without tile servers (issue 35 item 9), in chromium against a running demo, every
request that leaves 127.0.0.1 refused: the page draws the streets of the bundled road network
(served as a file of its own, with its ODbL attribution) as the base layer, and credits it.
With a tile server that answers (a local one), the streets step aside, unless
RIDECAST_MAP_ROADS=always asks for them under the tiles.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.dashboard.demo_process import DemoProcess, Printed, launch_demo
from tests.dashboard.test_browser import sign_in
from tests.waiting import eventually

pytestmark = pytest.mark.browser

Demo = tuple[DemoProcess, Printed]

# Pixels of the streets' canvas that are not transparent, at 1400x860 over Gothenburg.
MIN_INKED_PIXELS = 20_000


def test_the_road_network_is_served_as_its_own_file_with_its_attribution(demo: Demo) -> None:
    base = demo[0].base_url
    answer = httpx.get(f"{base}/dashboard/networks/gothenburg.json", timeout=60)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    doc = answer.json()
    assert doc["attribution"] == "© OpenStreetMap contributors"
    assert doc["license"] == "ODbL-1.0" and "openstreetmap.org/copyright" in doc["license_url"]
    assert len(doc["streets"]) > 5000
    south, west, north, east = doc["bounds"]
    assert south < 57.705 < north and west < 11.963 < east  # the demo's area is on it
    missing = httpx.get(f"{base}/dashboard/networks/straight.json", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_offline_the_map_draws_the_streets_and_credits_them(page: Any, demo: Demo) -> None:
    sign_in(page, demo)
    the_map = page.get_by_test_id("map")
    eventually(lambda: the_map.get_attribute("data-roads") == "shown", timeout=30,
               why=lambda: f"the streets drawn (data-roads={the_map.get_attribute('data-roads')})")
    assert int(the_map.get_attribute("data-road-streets")) > 5000
    inked = eventually(lambda: (n := page.evaluate(
          "() => { const c = document.querySelector('.leaflet-roads-pane canvas');"
          " if (!c || !c.width) return 0;"
          " const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
          " let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i] > 0) n += 1;"
          " return n; }")) >= MIN_INKED_PIXELS and n, timeout=20, what="streets on the canvas")
    assert inked >= MIN_INKED_PIXELS
    credit = page.locator(".leaflet-control-attribution").text_content()
    assert "OpenStreetMap" in credit and "road network (ODbL)" in credit
    assert page.locator(".leaflet-control-attribution a[href*='openstreetmap.org/copyright']"
                        ).count() == 1
    page.screenshot(path="test-artifacts/dashboard-offline-streets.png")
    assert page.errors == []


# A 1x1 grey PNG: what the local tile server answers for every tile.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c49444154789c636868680000030401814bd3d2100000000049454e44ae426082")


@pytest.fixture
def tile_server() -> Iterator[tuple[str, list[str]]]:
    """A tile server on loopback: any path answers PNG (with CORS, as Leaflet asks for);
    yields the URL template and the paths requested."""
    requested: list[str] = []

    class Tiles(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requested.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Tiles)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/{{z}}/{{x}}/{{y}}.png", requested
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("mode", "expected"), [("auto", "hidden"), ("always", "shown")])
def test_with_tiles_the_streets_step_aside_unless_asked_for_always(
        browser: Any, tmp_path: Path, tile_server: tuple[str, list[str]], mode: str,
        expected: str) -> None:
    tile_url, requested = tile_server
    process = launch_demo(tmp_path / "data", extra_env={
        "RIDECAST_TILE_URL": tile_url, "RIDECAST_MAP_ROADS": mode})
    context = browser.new_context()
    try:
        printed = process.wait_ready()
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        tiles_origin = tile_url.split("/{z}")[0]
        page.route(re.compile(rf"^(?!{re.escape(process.base_url)}/|{re.escape(tiles_origin)}/"
                              r"|data:|blob:)"), lambda route: route.abort())
        sign_in(page, (process, printed))
        the_map = page.get_by_test_id("map")
        eventually(lambda: requested and the_map.get_attribute("data-roads") == expected,
                   timeout=30,
                   why=lambda: f"tiles served ({len(requested)}) and the streets {expected} "
                           f"(data-roads={the_map.get_attribute('data-roads')})")
        credit = page.locator(".leaflet-control-attribution").text_content()
        assert credit.count("OpenStreetMap") == 1 and "road network (ODbL)" in credit
        assert page.errors == []
    finally:
        context.close()
        process.stop()
