"""One seed, one run: the demo's settings reproduce a run whenever it starts (issue 35 item 11).

With the default ``start_ts`` a run starts at the current whole second. The demo's flat demand
and traffic make the clock hour irrelevant, so two runs of one seed publish the same events in
the same order, only shifted in time: checked with two real runs on a real server (started at
different seconds), and in the engine across an hour boundary at two very different hours.
``ridecast simulations status`` (a real CLI process) prints the seed and the start that
reproduce the run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import httpx

from ridecast.cli.demo import simulation_data
from ridecast.simulator.core.engine import Engine
from ridecast.simulator.core.settings import read_settings
from tests.conftest import Server
from tests.waiting import eventually

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?[+-]\d\d:\d\d$")
RUN_S = 120  # a short run at full speed, on a loaded machine


def small_demo(speed: object = 1.0) -> dict[str, Any]:
    """The demo's settings (seed, flat demand and traffic, GPS every second) with a smaller
    fleet and a shorter shift, so that a run at full speed takes seconds."""
    data = simulation_data(1.0)
    data["simulator"].update({"vehicles": 12, "bookings_per_hour": 90, "duration_s": 900,
                              "speed": speed})
    return data


def relative(value: Any, start: datetime) -> Any:
    """``value`` with every timestamp replaced by its seconds after ``start``."""
    if isinstance(value, dict):
        return {k: relative(v, start) for k, v in value.items()}
    if isinstance(value, list):
        return [relative(v, start) for v in value]
    if isinstance(value, str) and ISO.match(value):
        return round((datetime.fromisoformat(value) - start).total_seconds(), 3)
    return value


def comparable(events: list[dict[str, Any]], start: str) -> list[Any]:
    """Events as a run defines them: no event_id or server_ts (the log's and the ingest's),
    times relative to the run's start."""
    origin = datetime.fromisoformat(start)
    return [relative({k: v for k, v in e.items() if k not in ("event_id", "server_ts")}, origin)
            for e in events]


def events_after(http: httpx.Client, sim: int, after: str | None) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if after is not None:
            params["after"] = after
        page = http.get(f"/api/v2/simulation/{sim}/events", params=params)
        page.raise_for_status()
        body = page.json()
        got += body["objects"]
        after = body["meta"].get("next_after")
        if not body["objects"] or after is None:
            return got


def one_run(http: httpx.Client, sim: int) -> dict[str, Any]:
    """Start a run, wait until it finished; its status."""
    started = http.post(f"/api/v2/simulation/{sim}/simulator/start")
    assert started.status_code == 200, started.text
    return eventually(
        lambda: (s := http.get(f"/api/v2/simulation/{sim}/simulator").json())["status"]
        == "finished" and s, timeout=RUN_S, step=0.2, what="the run to finish")


def test_two_real_runs_of_one_seed_publish_the_same_events(server: Server) -> None:
    user = server.create_user()
    sim = server.create_simulation(user, small_demo(speed="max"), name="reproduce")
    with server.client(user) as http:
        first = one_run(http, sim)
        first_events = events_after(http, sim, None)
        # The default start is the current whole second: make sure the second run's is another.
        eventually(lambda: datetime.now(UTC).replace(microsecond=0)
                   > datetime.fromisoformat(first["started_sim_ts"]),
                   timeout=5, what="the next second")
        second = one_run(http, sim)
        second_events = events_after(http, sim, first_events[-1]["event_id"])
    assert first["settings"]["start_ts"] is None  # the default start, both times
    assert first["started_sim_ts"] != second["started_sim_ts"]
    assert len(first_events) > 500
    assert {e["message_type"] for e in first_events} >= {"gps_data", "assignment", "offers"}
    assert comparable(first_events, first["started_sim_ts"]) == comparable(
        second_events, second["started_sim_ts"])
    assert first["kpis"]["bookings"] == second["kpis"]["bookings"] > 0

    # The CLI shows what reproduces the run: its seed and its start.
    shown = subprocess.run(
        [sys.executable, "-m", "ridecast.cli.main", "simulations", "status", str(sim)],
        env={**os.environ, "RIDECAST_URL": server.base_url, "RIDECAST_USER": user.name,
             "RIDECAST_API_KEY": user.key, "COLUMNS": "200"},
        capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    seed = small_demo()["simulator"]["seed"]
    assert f"seed {seed} · start {second['started_sim_ts']}" in shown.stdout, shown.stdout


def test_the_demo_settings_make_the_hour_of_the_start_irrelevant() -> None:
    """In the engine: the same seed started at midnight and at 17:23:41, through two clock
    hours (where congestion would change), gives the same events, shifted in time."""
    data = small_demo()
    starts = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 11, 26, 17, 23, 41, tzinfo=UTC)]
    runs = [comparable(Engine(1, read_settings(data), start).advance(7200.0), start.isoformat())
            for start in starts]
    assert len(runs[0]) > 1000
    assert runs[0] == runs[1]
