"""The simulator's REST controls and operations, against a real server over a real socket."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import Server, User

CENTRE = {"lat": 52.52, "lon": 13.405}
DATA = {
    "performance_tracker_enabled": False,
    "simulator": {
        "seed": 3, "vehicles": 3, "speed": 1, "bookings_per_hour": 0, "duration_s": 3600,
        "vehicle_break_probability": 0, "no_show_probability": 0,
        "area": {**CENTRE, "radius_m": 300},
    },
}
TRIP = {"pickup_lat": 52.52, "pickup_lon": 13.405, "dropoff_lat": 52.525, "dropoff_lon": 13.42}


@dataclass
class Sim:
    """A started simulator of a fresh user's simulation."""

    server: Server
    user: User
    id: int
    http: httpx.Client

    def url(self, path: str) -> str:
        return f"/api/v2/simulation/{self.id}/{path}"

    def post(self, path: str, json: Any = None, status: int = 200) -> dict[str, Any]:
        response = self.http.post(self.url(path), json=json)
        assert response.status_code == status, response.text
        body: dict[str, Any] = response.json()
        return body

    def error(self, path: str, status: int, code: str, json: Any = None) -> None:
        before = self.stored_count()
        body = self.post(path, json, status)
        assert body["error"]["code"] == code, body
        assert self.stored_count() == before  # nothing published

    def stored_count(self) -> int:
        body = self.http.get(self.url("events"), params={"limit": 1000}).json()
        return len([e for e in body["objects"] if e["message_type"] not in (
            "gps_data", "vehicle_states")])

    def book(self, **extra: Any) -> dict[str, Any]:
        return self.post("bookings", {**TRIP, **extra}, 201)


@pytest.fixture
def sim(server: Server) -> Iterator[Sim]:
    user = server.create_user()
    sim_id = server.create_simulation(user, DATA)
    with server.client(user) as http:
        started = http.post(f"/api/v2/simulation/{sim_id}/simulator/start")
        assert started.status_code == 200, started.text
        yield Sim(server, user, sim_id, http)
        http.post(f"/api/v2/simulation/{sim_id}/simulator/stop")


def test_lifecycle(server: Server) -> None:
    """idle -> running -> paused -> running -> stopped, with and without trailing slash;
    a transition that does not apply is a 409."""
    user = server.create_user()
    sim_id = server.create_simulation(user, DATA)
    base = f"/api/v2/simulation/{sim_id}/simulator"
    with server.client(user) as http:
        assert http.get(base).json() == {"status": "idle", "sim_ts": None, "kpis": {}}
        assert http.post(base + "/pause").json()["error"]["code"] == "invalid_state"
        assert http.post(base + "/start/").json()["status"] == "running"
        assert http.post(base + "/start").status_code == 409
        assert http.post(base + "/pause").json()["status"] == "paused"
        assert http.post(base + "/pause").status_code == 409
        assert http.post(base + "/resume/").json()["status"] == "running"
        status = http.get(base + "/").json()
        assert status["kpis"]["vehicles"] == 3 and status["sim_ts"]
        assert http.post(base + "/stop").json()["status"] == "stopped"
        assert http.post(base + "/stop").status_code == 409
        assert http.post(f"/api/v2/simulation/{sim_id}/bookings", json=TRIP).status_code == 409


def test_auth_and_visibility(server: Server) -> None:
    """No credentials: 401; another organisation's simulation: 404."""
    owner, stranger = server.create_user(), server.create_user()
    sim_id = server.create_simulation(owner, DATA)
    with server.client() as anonymous:
        assert anonymous.post(f"/api/v2/simulation/{sim_id}/simulator/start").status_code == 401
    with server.client(stranger) as http:
        response = http.post(f"/api/v2/simulation/{sim_id}/simulator/start")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "simulation_not_found"


def test_bad_simulator_settings(server: Server) -> None:
    """Bad data.simulator is refused when it is set (400 invalid_simulation_data)."""
    user = server.create_user()
    with server.client(user) as http:
        response = http.post("/api/v2/simulation", json={
            "name": "x", "data": {"simulator": {"vehicles": "many"}}})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_simulation_data"


def test_booking_offer_accept(sim: Sim) -> None:
    """A booking gets an offer; accepting it assigns the route; the events are stored."""
    body = sim.book()
    assert body["published"] == ["bookings", "calc_started", "scheduler_result", "offers"]
    offer = body["offer"]
    accepted = sim.post(f"offers/{offer['id']}/accept/")
    assert accepted["published"] == ["offer_accepted", "assignment", "vehicle_state_changed"]
    assert accepted["booking"]["status"] == "assigned"
    sim.error(f"offers/{offer['id']}/accept", 409, "invalid_state")
    sim.error(f"offers/{offer['id']}/reject", 409, "invalid_state")
    sim.error("offers/999999/accept", 404, "not_found")
    stored = sim.http.get(sim.url("events")).json()["objects"]
    types = [e["message_type"] for e in stored if e["message_type"] not in (
        "gps_data", "vehicle_states")]
    assert types == ["bookings", "calc_started", "scheduler_result", "offers",
                     "offer_accepted", "assignment", "vehicle_state_changed"]
    assert all(e["server_ts"] for e in stored if e["message_type"] != "gps_data")


def test_reject_and_no_offer(sim: Sim) -> None:
    """Rejecting gives offer_rejected; a booking out of reach gives no_offer."""
    offer = sim.book()["offer"]
    assert sim.post(f"offers/{offer['id']}/reject")["published"] == ["offer_rejected"]
    far = sim.book(pickup_lat=48.85, pickup_lon=2.35, dropoff_lat=48.86, dropoff_lon=2.36)
    assert far["published"] == ["bookings", "calc_started", "no_offer"]
    assert far["offer"] is None
    big = sim.book(passengers=9)
    assert big["published"][-1] == "no_offer"


def test_cancel(sim: Sim) -> None:
    """Cancelling an assigned booking re-plans its vehicle; twice is a 409."""
    body = sim.book()
    sim.post(f"offers/{body['offer']['id']}/accept")
    booking = body["booking"]["id"]
    cancelled = sim.post(f"bookings/{booking}/cancel")
    assert cancelled["published"] == ["bookings_cancellation", "assignment",
                                      "vehicle_state_changed"]
    sim.error(f"bookings/{booking}/cancel", 409, "invalid_state")
    sim.error("bookings/424242/cancel", 404, "not_found")


def test_vehicles(sim: Sim) -> None:
    """Disable and enable give vehicle_use; the same again is a 409; GPS push moves it."""
    disabled = sim.post("vehicles/1/disable")
    assert disabled["published"][:1] == ["vehicle_use"] and not disabled["vehicle"]["enabled"]
    sim.error("vehicles/1/disable", 409, "invalid_state")
    assert sim.post("vehicles/1/enable/")["published"] == ["vehicle_use",
                                                           "vehicle_state_changed"]
    sim.error("vehicles/1/enable", 409, "invalid_state")
    sim.error("vehicles/99/enable", 404, "not_found")
    pushed = sim.post("vehicles/2/position", {"lat": 52.521, "lon": 13.406, "bearing": 90.0})
    assert pushed["published"] == ["vehicle_state_changed", "gps_data"]
    assert abs(pushed["vehicle"]["lat"] - 52.521) < 1e-9
    sim.error("vehicles/2/position", 400, "validation_error", {"lat": 91, "lon": 0})
    sim.error("vehicles/2/position", 400, "validation_error", {"lat": 1})


def test_node_status(sim: Sim) -> None:
    """A driver app completes pickup then dropoff; wrong order, type or node is refused."""
    body = sim.book()
    sim.post(f"offers/{body['offer']['id']}/accept")
    booking = body["booking"]
    pickup, dropoff = booking["pickup_node_id"], booking["dropoff_node_id"]
    sim.error(f"nodes/{dropoff}/status", 409, "invalid_state", {"action": "dropoff_success"})
    sim.error(f"nodes/{pickup}/status", 400, "validation_error", {"action": "dropoff_success"})
    sim.error(f"nodes/{pickup}/status", 400, "validation_error", {"action": "teleport"})
    sim.error("nodes/777777/status", 404, "not_found", {"action": "pickup_success"})
    done = sim.post(f"nodes/{pickup}/status", {"action": "pickup_success",
                                               "driver_note": "at the corner"})
    assert done["published"][0] == "node_status"
    sim.error(f"nodes/{pickup}/status", 409, "invalid_state", {"action": "pickup_success"})
    done = sim.post(f"nodes/{dropoff}/status/", {"action": "dropoff_success"})
    assert done["published"][0] == "node_status"
    assert done["booking"]["status"] == "completed"


def test_no_show(sim: Sim) -> None:
    """A driver's no-show gives fail_to_board and the vehicle's new route."""
    body = sim.book()
    accepted = sim.post(f"offers/{body['offer']['id']}/accept")
    vehicle = accepted["booking"]["vehicle_id"]
    pickup = body["booking"]["pickup_node_id"]
    sim.error(f"nodes/{pickup}/status", 409, "invalid_state",
              {"action": "no_show", "vehicle_id": vehicle % 3 + 1})
    failed = sim.post(f"nodes/{pickup}/status", {"action": "no_show", "vehicle_id": vehicle})
    assert failed["published"] == ["fail_to_board", "assignment", "vehicle_state_changed"]
    assert failed["booking"]["status"] == "no_show"


def test_bad_bodies(sim: Sim) -> None:
    """Missing fields, wrong types and unknown fields are 400s that publish nothing."""
    sim.error("bookings", 400, "validation_error", {"pickup_lat": 1})
    sim.error("bookings", 400, "validation_error", {**TRIP, "passengers": 0})
    sim.error("bookings", 400, "validation_error", {**TRIP, "colour": "red"})
    response = sim.http.post(sim.url("bookings"), content=b"{not json",
                             headers={"content-type": "application/json"})
    assert response.status_code == 400


# Every setting that had no upper bound, with a value that overflowed the engine's arithmetic.
UNBOUNDED_BEFORE = {"offer_timeout_s": 1e300, "max_wait_s": 1e300, "break_duration_s": 1e300,
                    "min_trip_m": 1e300, "max_candidates": 2**62, "gps_interval_s": 1e300,
                    "snapshot_interval_s": 1e300, "arrival_interval_s": 1e300,
                    "congestion_profile": [1e300] * 24,
                    "start_ts": "9999-12-31T00:00:00+00:00"}


@pytest.mark.parametrize("field", sorted(UNBOUNDED_BEFORE))
def test_a_setting_past_its_bound_is_refused_naming_it(server: Server, field: str) -> None:
    """A setting beyond its documented bound is a 400 naming the field, when the simulation
    is created: the run that would have answered 500 to a booking never starts."""
    user = server.create_user()
    data = {**DATA, "simulator": {**DATA["simulator"], field: UNBOUNDED_BEFORE[field]}}
    with server.client(user) as http:
        response = http.post("/api/v2/simulation", json={"name": "bounds", "data": data})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_simulation_data"
    assert any(field in detail["loc"] for detail in error["details"]), error


def test_operation_arguments_past_their_bounds_are_refused(sim: Sim) -> None:
    """A booking's own max_wait_s and a GPS speed have upper bounds too: 400, nothing
    published, and the run goes on."""
    sim.error("bookings", 400, "validation_error", {**TRIP, "max_wait_s": 1e300})
    sim.error("vehicles/1/position", 400, "validation_error",
              {"lat": 52.52, "lon": 13.405, "speed": 1e300})
    assert sim.book()["booking"]["id"]


@pytest.mark.parametrize("control", ["start", "pause", "resume", "stop"])
def test_unknown_fields_in_a_control_body_are_refused_naming_them(
        server: Server, control: str) -> None:
    """``start`` with {"vehicles": 3000} does not run 12 vehicles without a word: any field
    in a control's body is a 400 naming it, and nothing changes; an empty object or no
    body at all is fine."""
    user = server.create_user()
    sim_id = server.create_simulation(user, DATA)
    base = f"/api/v2/simulation/{sim_id}/simulator"
    with server.client(user) as http:
        if control != "start":
            assert http.post(base + "/start", json={}).status_code == 200
        if control == "resume":
            assert http.post(base + "/pause").status_code == 200
        before = http.get(base).json()["status"]
        response = http.post(f"{base}/{control}", json={"vehicles": 3000})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "validation_error"
        assert "vehicles" in error["message"]
        assert [d["field"] for d in error["details"]] == ["body.vehicles"]
        assert http.get(base).json()["status"] == before
        assert http.post(f"{base}/{control}").status_code == 200
