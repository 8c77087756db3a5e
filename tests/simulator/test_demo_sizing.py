"""The demo's fleet serves its demand, read as a visitor reads it (issue 35 item 10).

The issue's visitor ran the demo and read the dashboard: 157 of 360 requests served at the
demo's hour, 39.9% refused at 10x. Here a real ``ridecast serve`` runs the demo's own
simulation settings (``ridecast demo``'s ``simulation_data``) faster than real time, and the
test reads the KPIs the dashboard draws its tiles from (``GET .../simulator``) once the run is
past its warm-up and a simulated hour: most requests that ended were served, the *refused: no
offer* tile stays near zero, the mean wait is a few minutes, and all 18 event types were
published. The bounds are the service docs/simulator.md ("Sizing a fleet") describes; the
sizing the demo had before (30 vehicles, 360 requests an hour) fails every one of them
(docs/performance.md, bench/demo_sizing.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ridecast.cli.demo import simulation_data
from ridecast.events.types import ALL_TYPES
from tests.conftest import Server
from tests.waiting import eventually

SPEED = 100.0  # 1.25 simulated hours in 45 s of wall time
SIMULATED_S = 900.0 + 3600.0  # the KPIs' warm-up, then an hour measured
WALL_S = 300.0  # generous: the machine is shared


def _status(http: Any, sim: int) -> dict[str, Any]:
    answer = http.get(f"/api/v2/simulation/{sim}/simulator")
    assert answer.status_code == 200, answer.text
    status: dict[str, Any] = answer.json()
    return status


def _elapsed_s(status: dict[str, Any]) -> float:
    return (datetime.fromisoformat(status["sim_ts"])
            - datetime.fromisoformat(status["started_sim_ts"])).total_seconds()


def test_the_demo_serves_most_requests_with_waits_of_a_few_minutes(server: Server) -> None:
    user = server.create_user()
    sim = server.create_simulation(user, data=simulation_data(SPEED), name="demo sizing")
    with server.client(user) as http:
        started = http.post(f"/api/v2/simulation/{sim}/simulator/start")
        assert started.status_code == 200, started.text

        def far_enough() -> dict[str, Any] | None:
            status = _status(http, sim)
            if _elapsed_s(status) >= SIMULATED_S:
                return status
            assert status["status"] == "running", status
            return None

        status = eventually(far_enough, timeout=WALL_S, step=0.5,
                            what=f"{SIMULATED_S} s simulated",
                            why=lambda: f"the run reached {_elapsed_s(_status(http, sim))} s")
        http.post(f"/api/v2/simulation/{sim}/simulator/stop")

    k = status["kpis"]
    ended = (k["served"] + k["no_offer"] + k["offers_rejected"] + k["offers_expired"]
             + k["no_shows"] + k["cancellations"])
    summary = {name: k[name] for name in (
        "bookings", "served", "on_board", "no_offer", "rejected_rate", "wait_mean_s",
        "wait_p95_s")}
    print(f"demo sizing after {_elapsed_s(status):.0f} simulated s: {summary}, ended {ended}")
    assert k["bookings"] >= 150, summary  # 180 an hour: a busy service, not an idle one
    assert k["served"] > 0.55 * ended, summary  # most requests that ended were served
    assert k["rejected_rate"] <= 0.05, summary  # the *refused: no offer* tile (was 39.9%)
    assert k["wait_mean_s"] <= 300.0, summary  # a wait of a few minutes
    assert set(k["events_by_type"]) == set(ALL_TYPES), sorted(k["events_by_type"])
