"""The dashboard in a real browser against a running ``ridecast demo`` (no internet, no tiles)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ridecast.cli.demo import DEMO_SIMULATOR
from tests.dashboard.conftest import ARTIFACTS, local_only
from tests.dashboard.demo_process import DemoProcess, Printed, launch_demo
from tests.waiting import eventually

pytestmark = pytest.mark.browser

Demo = tuple[DemoProcess, Printed]


def sign_in(page: Any, demo: Demo) -> None:
    process, printed = demo
    user, key = printed.export_env()["RIDECAST_USER"], printed.export_env()["RIDECAST_API_KEY"]
    page.goto(process.base_url + "/")
    page.get_by_test_id("login-user").fill(user)
    page.get_by_test_id("login-key").fill(key)
    page.get_by_test_id("login-submit").click()
    eventually(lambda: page.get_by_test_id("connection-status").get_attribute("data-state")
               == "live", timeout=20, what="the stream to be live")


def vehicle_positions(page: Any) -> dict[str, tuple[str, str]]:
    positions: dict[str, tuple[str, str]] = page.eval_on_selector_all(
        "[data-testid=vehicle]",
        "els => Object.fromEntries(els.map("
        "e => [e.dataset.vehicleId, [e.dataset.lat, e.dataset.lon]]))",
    )
    return positions


def test_vehicles_appear_and_move_and_the_feed_fills(page: Any, demo: Demo) -> None:
    """Signed in, the map shows the whole fleet, vehicles move, the feed and KPIs fill."""
    sign_in(page, demo)
    fleet = DEMO_SIMULATOR["vehicles"]
    first = eventually(lambda: (p := vehicle_positions(page)) and len(p) == fleet and p, timeout=30,
                       what=f"{fleet} vehicles on the map")
    eventually(lambda: any(vehicle_positions(page).get(v) != pos for v, pos in first.items()),
               timeout=30, what="a vehicle to move")
    eventually(lambda: page.get_by_test_id("feed-item").count() >= 20, timeout=30,
               why=lambda: f"the feed to fill ({page.get_by_test_id('feed-item').count()} rows, "
               f"{page.get_by_test_id('feed-total').text_content()} events)")
    eventually(lambda: page.get_by_test_id("sim-status").text_content() == "running", timeout=10,
               what="the simulator status")
    eventually(lambda: int(page.get_by_test_id("count-moving").text_content()) > 0, timeout=10,
               what="the legend to count moving vehicles")
    assert page.get_by_test_id("kpi-bookings").count() == 1
    assert "No webhook set" in page.get_by_test_id("webhook-panel").text_content()
    time.sleep(1.5)  # let the markers glide and routes draw before the picture
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"))
    assert page.errors == []


def test_feed_filter_hides_and_shows_a_type(page: Any, demo: Demo) -> None:
    """Clicking a type's chip hides its events from the feed; clicking again brings them back."""
    sign_in(page, demo)
    chip = page.get_by_test_id("feed-filter-gps_data")
    eventually(lambda: chip.count() == 1, timeout=30, what="gps_data events")
    chip.click()
    eventually(lambda: chip.get_attribute("aria-pressed") == "false", timeout=5,
               what="the chip to switch off")
    # New gps_data arrive meanwhile (the chip counts them): none of them is shown.
    seen = int(chip.locator("b").text_content())
    eventually(lambda: int(chip.locator("b").text_content()) >= seen + 3, timeout=30,
               what="more gps_data events while they are hidden")
    assert page.locator("[data-testid=feed-item][data-type=gps_data]").count() == 0
    assert page.get_by_test_id("feed-item").count() > 0
    chip.click()
    eventually(lambda: page.locator("[data-testid=feed-item][data-type=gps_data]").count() > 0,
               timeout=10, what="gps_data rows back")
    assert page.errors == []


def test_wrong_key_is_refused_with_a_message(page: Any, demo: Demo) -> None:
    """A wrong API key keeps the sign-in form up and says why."""
    page.goto(demo[0].base_url + "/")
    page.get_by_test_id("login-user").fill("demo")
    page.get_by_test_id("login-key").fill("rck_wrong")
    page.get_by_test_id("login-submit").click()
    eventually(lambda: page.get_by_test_id("login-error").text_content(), timeout=10,
               what="an error")
    assert "Unknown user name or API key" in page.get_by_test_id("login-error").text_content()
    assert page.get_by_test_id("login").is_visible()


def sign_in_from_link(page: Any, printed: Printed) -> None:
    """Open the printed link (user name and simulation, no key) and paste the printed key."""
    page.goto(printed.dashboard_url)
    assert page.get_by_test_id("login-user").input_value() == "demo"  # filled from the link
    page.get_by_test_id("login-key").fill(printed.export_env()["RIDECAST_API_KEY"])
    page.get_by_test_id("login-submit").click()
    eventually(lambda: page.get_by_test_id("connection-status").get_attribute("data-state")
               == "live", timeout=20, what="the stream to be live")


def test_printed_link_carries_no_key_and_the_session_keeps_none(page: Any, demo: Demo) -> None:
    """The printed link names the user and simulation only; signing in trades the key for a
    session token, and neither the address, the history nor the tab's storage holds the key."""
    key = demo[1].export_env()["RIDECAST_API_KEY"]
    assert key not in demo[1].dashboard_url and "key=" not in demo[1].dashboard_url
    sign_in_from_link(page, demo[1])
    assert page.url.endswith("#sim=" + demo[1].listen.split()[-1])
    storage = page.evaluate("JSON.stringify(Object.assign({}, sessionStorage))")
    assert key not in storage and "token" in storage
    # A reload resumes the session from the tab's storage, without asking for the key again.
    page.reload()
    eventually(lambda: page.get_by_test_id("connection-status").get_attribute("data-state")
               == "live", timeout=20, what="live again after a reload")
    assert page.get_by_test_id("login").is_hidden()
    assert page.errors == []


def test_an_old_link_with_a_key_is_not_used_and_leaves_the_address(page: Any, demo: Demo) -> None:
    key = demo[1].export_env()["RIDECAST_API_KEY"]
    page.goto(f"{demo[0].base_url}/#user=demo&key={key}&sim=1")
    eventually(lambda: "no longer carry" in (page.get_by_test_id("login-error").text_content()
                                             or ""), timeout=10, what="the sign-in form to explain")
    assert key not in page.url
    assert page.get_by_test_id("login").is_visible()


def test_dashboard_reconnects_when_the_server_comes_back(browser: Any, tmp_path: Path) -> None:
    """When the server stops, the page says so and retries; when it is back, it goes live
    again on its own and events flow."""
    data = tmp_path / "data"
    first = launch_demo(data)
    context = browser.new_context()
    try:
        printed = first.wait_ready()
        page = context.new_page()
        local_only(page, first.base_url)
        sign_in_from_link(page, printed)
        state = page.get_by_test_id("connection-status")
        assert first.stop(signal.SIGTERM) == 0
        eventually(lambda: state.get_attribute("data-state") in ("reconnecting", "connecting"),
                   timeout=10, what="the page to notice")
        second = launch_demo(data, port=first.port)
        try:
            second.wait_ready()
            eventually(lambda: state.get_attribute("data-state") == "live", timeout=30,
                       what="live again")
            seen = int(page.get_by_test_id("feed-total").text_content().replace(",", ""))
            eventually(lambda: int(page.get_by_test_id("feed-total").text_content()
                                   .replace(",", "")) > seen, timeout=20, what="new events")
        finally:
            second.stop()
    finally:
        first.stop()
        context.close()
