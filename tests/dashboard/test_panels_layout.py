"""The dashboard's side column in chromium, with a webhook whose every delivery fails:

- (a) at 1366x768 and 1280x720 the event feed stays in view, tall enough to read, beside the
  map; the KPI panel fits whole (it does not scroll), while a long webhook panel shrinks and
  scrolls (checked by bounding boxes);
- (b) the webhook reads "failing" with its last error, not "active";
- (c) each KPI label says what it counts, and the page shows one event count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import free_port
from tests.dashboard.conftest import local_only
from tests.dashboard.demo_process import DemoProcess, Printed
from tests.dashboard.test_browser import sign_in
from tests.waiting import eventually

pytestmark = pytest.mark.browser

Demo = tuple[DemoProcess, Printed]
VIEWPORTS = [(1366, 768), (1280, 720)]
MIN_FEED_PX = 220  # about ten rows


@pytest.fixture(scope="module")
def failing_webhook(demo: Demo) -> str:
    """Point the demo simulation's webhook at a port where nothing listens (every delivery
    fails with a refused connection); returns that URL."""
    process, printed = demo
    env = printed.export_env()
    sim = printed.listen.split()[-1]
    target = f"http://127.0.0.1:{free_port()}/hook"
    with httpx.Client(base_url=process.base_url, timeout=30,
                      auth=(env["RIDECAST_USER"], env["RIDECAST_API_KEY"])) as http:
        current = http.get(f"/api/v2/simulation/{sim}")
        data = {**current.json()["data"], "messaging_webhook_url": target,
                "messaging_webhook_message_types": ["gps_data", "vehicle_states"]}
        answer = http.patch(f"/api/v2/simulation/{sim}", json={"data": data},
                            headers={"If-Match": current.headers["ETag"]})
        answer.raise_for_status()
    return target


@pytest.fixture(params=VIEWPORTS, ids=[f"{w}x{h}" for w, h in VIEWPORTS])
def sized_page(request: pytest.FixtureRequest, browser: Any, demo: Demo,
               failing_webhook: str) -> Iterator[Any]:
    width, height = request.param
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    local_only(page, demo[0].base_url)
    sign_in(page, demo)
    yield page
    context.close()


def box(page: Any, testid: str) -> dict[str, float]:
    found: dict[str, float] | None = page.get_by_test_id(testid).first.bounding_box()
    assert found is not None, f"{testid} is not rendered"
    return found


def wait_for_failing(page: Any) -> Any:
    status = page.get_by_test_id("webhook-status")
    eventually(lambda: status.count() and status.get_attribute("data-state") == "failing",
               timeout=40,
               why=lambda: f"the webhook to read failing (it reads "
                       f"{status.get_attribute('data-state') if status.count() else 'nothing'})")
    return status


def test_the_event_feed_stays_in_view_beside_full_panels(sized_page: Any) -> None:
    page = sized_page
    wait_for_failing(page)
    eventually(lambda: page.get_by_test_id("webhook-delivery").count() >= 5, timeout=30,
               what="5 deliveries")
    eventually(lambda: page.get_by_test_id("feed-item").count() >= 30, timeout=30,
               what="30 feed rows")
    width, height = page.viewport_size["width"], page.viewport_size["height"]
    page.screenshot(path=f"test-artifacts/dashboard-{width}x{height}.png")  # also on failure
    kpis, webhook = box(page, "kpi-panel"), box(page, "webhook-panel")
    feed_panel, feed = box(page, "feed-panel"), box(page, "event-feed")
    map_box = box(page, "map")
    # Stacked in order without overlap, all inside the window.
    assert kpis["y"] + kpis["height"] <= webhook["y"] + 0.5
    assert webhook["y"] + webhook["height"] <= feed_panel["y"] + 0.5
    assert feed_panel["y"] + feed_panel["height"] <= height + 0.5
    assert feed_panel["x"] + feed_panel["width"] <= width + 0.5
    # The feed list itself is tall enough to read, and its rows are on screen.
    assert feed["height"] >= MIN_FEED_PX, feed
    assert feed["y"] + feed["height"] <= height + 0.5
    rows_in_view = page.eval_on_selector_all(
        "[data-testid=feed-item]",
        f"els => els.filter(e => {{ const r = e.getBoundingClientRect();"
        f" return r.height > 0 && r.top >= {feed['y'] - 0.5}"
        f" && r.bottom <= {feed['y'] + feed['height'] + 0.5}; }}).length")
    assert rows_in_view >= 9, rows_in_view
    # The KPI panel shows every main indicator without a scroll bar.
    overflow = page.get_by_test_id("kpi-panel").evaluate(
        "e => e.scrollHeight - e.clientHeight")
    assert overflow <= 1, f"the KPI panel scrolls by {overflow} px at {width}x{height}"
    # The map keeps most of the width, beside the column.
    assert map_box["width"] >= width * 0.6 and map_box["x"] + map_box["width"] <= kpis["x"]
    assert page.errors == []


def test_a_webhook_whose_deliveries_all_fail_reads_failing_with_the_error(
        sized_page: Any, failing_webhook: str) -> None:
    page = sized_page
    status = wait_for_failing(page)
    assert "failing" in status.text_content() and "active" not in status.text_content()
    assert failing_webhook in status.text_content()
    error = page.get_by_test_id("webhook-error")
    assert error.is_visible()
    text = error.text_content()
    assert "last error" in text and "connect" in text.lower(), text
    statuses = page.eval_on_selector_all("[data-testid=webhook-delivery]",
                                         "els => els.map(e => e.dataset.status)")
    assert statuses and "succeeded" not in statuses
    # Nothing gets through: the backlog and the age of its oldest event are shown.
    backlog = page.get_by_test_id("webhook-backlog")
    eventually(lambda: backlog.count() and int(backlog.get_attribute("data-backlog")) > 0,
               timeout=20,
               why=lambda: "a backlog on the webhook panel")
    assert "to send" in backlog.text_content() and "oldest" in backlog.text_content()


def test_kpi_labels_say_what_they_count_and_one_event_count_is_shown(sized_page: Any) -> None:
    page = sized_page
    eventually(lambda: page.get_by_test_id("kpi-occupancy").count() == 1, timeout=20,
               what="the KPIs")
    label = page.get_by_test_id("kpi-rejected_rate").locator("dt").text_content()
    assert "no offer" in label and "% of requests" in label
    assert "rejected or let expire are not in it" in page.get_by_test_id(
        "kpi-rejected_rate").get_attribute("title")
    # Passenger-km over vehicle-km, not "riders per vehicle-km".
    assert "passenger-km ÷ vehicle-km" in page.get_by_test_id(
        "kpi-occupancy").locator("dt").text_content()
    # The literature's indicators are listed with the rest.
    for name in ("served_share", "fleet_utilisation", "pooling_share", "distance_saved",
                 "rides_per_vehicle_hour", "rebalancing_km", "punctual_share"):
        assert page.get_by_test_id(f"kpi-{name}").count() == 1, name
    assert "riders dropped off" in page.get_by_test_id("kpi-served").text_content()
    assert page.locator("[data-testid=kpi-events]").count() == 0  # one event count: the feed's
    assert "received" in page.get_by_test_id("feed-panel").locator(".card-head").text_content()
    # No label is cut off: every tile's label fits its tile.
    clipped = page.eval_on_selector_all(
        "[data-testid=kpis] dt", "els => els.filter(e => e.scrollWidth > e.clientWidth + 1)"
        ".map(e => e.textContent)")
    assert clipped == []
