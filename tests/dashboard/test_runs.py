"""The dashboard follows the simulator's run (issue 35 items 7 and 11), in chromium against a
running demo at 20x real time (so that a run has many bookings within seconds):

- a new run clears the view: after the simulator is stopped and started again through the
  API, the feed holds only the new run's events, the chips count only them, and the map's
  stops and requests are no more than the new run's bookings (read after the page, so the
  server is never behind it); after the demo itself is restarted (the issue's case) the page
  shows one run too, the new one or the one the restarted server took over;
- the simulator panel shows what reproduces the run: its seed and its start.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ridecast.cli.demo import DEMO_SIMULATOR
from tests.dashboard.conftest import local_only
from tests.dashboard.demo_process import DemoProcess, Printed, launch_demo
from tests.waiting import eventually

pytestmark = pytest.mark.browser

SPEED = "20"
RUN_S = 60  # generous: the machine is shared


def api(process: DemoProcess, printed: Printed) -> httpx.Client:
    env = printed.export_env()
    return httpx.Client(base_url=process.base_url, timeout=30,
                        auth=(env["RIDECAST_USER"], env["RIDECAST_API_KEY"]))


def simulator(http: httpx.Client, sim: str) -> dict[str, Any]:
    answer: dict[str, Any] = http.get(f"/api/v2/simulation/{sim}/simulator").json()
    return answer


def count(page: Any, testid: str) -> int:
    return int(page.get_by_test_id(testid).text_content().replace(",", ""))


def chip(page: Any, message_type: str) -> int:
    found = page.get_by_test_id(f"feed-filter-{message_type}")
    return int(found.locator("b").text_content()) if found.count() else 0


def feed_ids(page: Any) -> list[int]:
    ids: list[str] = page.eval_on_selector_all("[data-testid=feed-item]",
                                               "els => els.map(e => e.dataset.eventId)")
    return [int(i) for i in ids]


def shows_only_the_run_after(page: Any, first_id: int) -> bool:
    """Every feed row is an event after ``first_id``, and there are some."""
    ids = feed_ids(page)
    return len(ids) >= 5 and min(ids) > first_id


def check_view_is_one_run(page: Any, http: httpx.Client, sim: str, after: int | None) -> str:
    """The page shows the simulator's current run and nothing of another: its feed (only
    events after ``after``, the last id before the run, when known), its chips and its map's
    stops are within the run's own counts (read after the page, so never behind it). Returns
    the run's start."""
    if after is not None:
        eventually(lambda: shows_only_the_run_after(page, after), timeout=RUN_S,
                   why=lambda: f"a feed of the new run only (ids after {after}; "
                           f"oldest shown {min(feed_ids(page), default=None)})")
    # Some bookings in the run, so that stale stops would show.
    eventually(lambda: chip(page, "bookings") >= 3, timeout=RUN_S, what="the run's bookings")
    run = page.get_by_test_id("sim-run")
    eventually(lambda: run.get_attribute("data-start") == simulator(http, sim)["started_sim_ts"],
               timeout=10, what="the run's start in the panel")
    on_page = {name: count(page, f"count-{name}") for name in ("pickups", "dropoffs", "waiting")}
    bookings_chip = chip(page, "bookings")
    total = count(page, "feed-total")
    if after is not None:
        # The log, read after the page, is never behind it.
        last = last_event_id_of(http)
        assert total <= last - after, (total, after, last)

    def covers_the_page() -> dict[str, Any] | None:
        # A run's KPIs are recomputed about once a second (less often on a busy engine), so
        # a status read after the page may still be a step behind it: wait until one has
        # caught up. A page that showed another run's events or stops would stay ahead of
        # them for far longer than this wait.
        status = simulator(http, sim)
        kpis = status["kpis"]
        caught_up = (bookings_chip <= kpis["bookings"]
                     and max(on_page.values()) <= kpis["bookings"]
                     and total <= kpis["events"])
        return status if caught_up else None

    status = eventually(covers_the_page, timeout=10,
                        what="the run's KPIs to cover what the page shows",
                        why=lambda: (bookings_chip, on_page, total,
                                     simulator(http, sim)["kpis"]))
    # The panel names the run: the seed and the start that reproduce it.
    assert f"seed {DEMO_SIMULATOR['seed']} · start " in run.text_content()
    assert status["started_sim_ts"] in run.get_attribute("title")
    return str(status["started_sim_ts"])


def last_event_id_of(http: httpx.Client) -> int:
    return int(http.get("/healthz").json()["last_event_id"])


@pytest.fixture
def fast_demo(tmp_path: Path) -> Iterator[tuple[DemoProcess, Printed]]:
    data = tmp_path / "data"
    process = launch_demo(data, args=["--speed", SPEED])
    try:
        yield process, process.wait_ready()
    finally:
        process.stop()


def test_a_new_run_clears_the_view_and_the_panel_names_it(
        browser: Any, fast_demo: tuple[DemoProcess, Printed], tmp_path: Path) -> None:
    process, printed = fast_demo
    sim = printed.listen.split()[-1]
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    try:
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        local_only(page, process.base_url)
        page.goto(printed.dashboard_url)
        page.get_by_test_id("login-key").fill(printed.export_env()["RIDECAST_API_KEY"])
        page.get_by_test_id("login-submit").click()
        eventually(lambda: page.get_by_test_id("connection-status").get_attribute("data-state")
                   == "live", timeout=20, what="the stream to be live")
        # The first run gets busy: stops on the map, bookings counted.
        eventually(lambda: chip(page, "bookings") >= 15, timeout=RUN_S,
                   what="15 bookings in the first run")
        eventually(lambda: count(page, "count-pickups") + count(page, "count-dropoffs") >= 4,
                   timeout=RUN_S, what="stops on the map")

        with api(process, printed) as http:
            # A new run through the API (what the dashboard's Start button does).
            assert http.post(f"/api/v2/simulation/{sim}/simulator/stop").status_code == 200
            after = last_event_id_of(http)
            assert http.post(f"/api/v2/simulation/{sim}/simulator/start").status_code == 200
            second = check_view_is_one_run(page, http, sim, after)
        eventually(lambda: chip(page, "bookings") >= 15, timeout=RUN_S,
                   what="15 bookings in the second run")

        # The demo restarted (the case): the page reconnects and shows the run the
        # simulator runs then: a new one, or the same one taken over and continued
        # (docs/simulator-ownership.md), each as one view.
        assert process.stop(signal.SIGTERM, timeout=RUN_S) == 0, process.stderr()[-3000:]
        before_restart = last_event_id_of_db(process)
        again = launch_demo(process.data_dir, port=process.port, args=["--speed", SPEED])
        try:
            printed_again = again.wait_ready()
            with api(again, printed_again) as http:
                restarted = simulator(http, sim)["started_sim_ts"]
                check_view_is_one_run(page, http, sim,
                                      before_restart if restarted != second else None)
            page.screenshot(path="test-artifacts/dashboard-new-run.png")
        finally:
            again.stop()
        assert page.errors == []
    finally:
        context.close()


def last_event_id_of_db(process: DemoProcess) -> int:
    """The newest event id of a stopped demo, from its database (the server is down)."""
    import sqlite3

    with sqlite3.connect(process.data_dir / "ridecast.db") as db:
        (newest,) = db.execute("SELECT max(id) FROM events").fetchone()
    return int(newest)
