"""The map without tile servers (issue 35 item 9), in chromium against a running demo, every
request that leaves 127.0.0.1 refused: the page draws the streets of the bundled road network
(served as a file of its own, with its ODbL attribution) as the base layer, and credits it.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.dashboard.demo_process import DemoProcess, Printed
from tests.dashboard.test_browser import sign_in, wait_for

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
    wait_for(lambda: the_map.get_attribute("data-roads") == "shown", 30,
             lambda: f"the streets drawn (data-roads={the_map.get_attribute('data-roads')})")
    assert int(the_map.get_attribute("data-road-streets")) > 5000
    inked = wait_for(lambda: (n := page.evaluate(
        "() => { const c = document.querySelector('.leaflet-roads-pane canvas');"
        " if (!c || !c.width) return 0;"
        " const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let n = 0; for (let i = 3; i < px.length; i += 4) if (px[i] > 0) n += 1;"
        " return n; }")) >= MIN_INKED_PIXELS and n, 20, "streets on the canvas")
    assert inked >= MIN_INKED_PIXELS
    credit = page.locator(".leaflet-control-attribution").text_content()
    assert "OpenStreetMap" in credit and "road network (ODbL)" in credit
    assert page.locator(".leaflet-control-attribution a[href*='openstreetmap.org/copyright']"
                        ).count() == 1
    page.screenshot(path="test-artifacts/dashboard-offline-streets.png")
    assert page.errors == []
