"""Bad input gets a precise JSON error and changes nothing in the store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from ridecast.events.examples import example_event
from tests.conftest import Server, User


@dataclass
class World:
    server: Server
    user: User
    sim: int
    http: httpx.Client

    def snapshot(self) -> tuple[Any, Any]:
        events = self.http.get(f"/api/v2/simulation/{self.sim}/events").json()
        sim = self.http.get(f"/api/v2/simulation/{self.sim}").json()
        return events, sim


@pytest.fixture
def world(server: Server) -> Iterator[World]:
    user = server.create_user()
    sim = server.create_simulation(user, {"keep": "me"})
    with server.client(user) as http:
        http.post(f"/api/v2/simulation/{sim}/events", json=example_event("bookings", sim))
        yield World(server, user, sim, http)


def _error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


def _post(world: World, content: bytes | str) -> httpx.Response:
    return world.http.post(
        f"/api/v2/simulation/{world.sim}/events", content=content,
        headers={"Content-Type": "application/json"},
    )


def test_malformed_json(world: World) -> None:
    """A body that is not JSON is invalid_json (400)."""
    before = world.snapshot()
    _error(_post(world, b'{"message_type": "bookings",'), 400, "invalid_json")
    assert world.snapshot() == before


def test_unknown_message_type(world: World) -> None:
    """An unknown type is named, with the valid ones listed."""
    before = world.snapshot()
    event = example_event("bookings", world.sim) | {"message_type": "teleport"}
    err = _error(world.http.post(f"/api/v2/simulation/{world.sim}/events", json=event), 400,
                 "unknown_message_type")
    assert "teleport" in err["details"][0]["message"]
    assert "vehicle_arrival_grouped" in err["details"][0]["message"]
    assert world.snapshot() == before


def test_wrong_types_and_missing_fields_reject_the_whole_batch(world: World) -> None:
    """One bad event in a batch rejects all of it, with index and field of each error."""
    before = world.snapshot()
    good = example_event("offer_accepted", world.sim)
    wrong_type = example_event("gps_data", world.sim)
    wrong_type["data"]["vehicle_id"] = "12"  # a string where the spec says integer
    missing = example_event("vehicle_use", world.sim)
    del missing["data"]["action"]
    bad_uuid = example_event("fail_to_board", world.sim)
    bad_uuid["data"]["booking_uids"] = ["not-a-uuid"]
    no_offset = example_event("bookings", world.sim)
    no_offset["current_sim_ts"] = "2026-11-22T08:15:00"
    response = world.http.post(f"/api/v2/simulation/{world.sim}/events",
                               json=[good, wrong_type, missing, bad_uuid, no_offset])
    err = _error(response, 400, "validation_error")
    places = {(d["index"], d["field"]) for d in err["details"]}
    assert places == {(1, "data.vehicle_id"), (2, "data.action"), (3, "data.booking_uids.0"),
                      (4, "current_sim_ts")}
    assert world.snapshot() == before


def test_simulation_id_mismatch(world: World) -> None:
    """An event naming another simulation than the path is refused."""
    before = world.snapshot()
    event = example_event("bookings", world.sim + 1000)
    _error(world.http.post(f"/api/v2/simulation/{world.sim}/events", json=event), 400,
           "simulation_id_mismatch")
    assert world.snapshot() == before


def test_non_object_data_on_simulation(world: World) -> None:
    """Simulation data must be a JSON object; the old data stays."""
    before = world.snapshot()
    response = world.http.patch(f"/api/v2/simulation/{world.sim}", json={"data": [1, 2]})
    _error(response, 400, "invalid_simulation_data")
    response = world.http.post("/api/v2/simulation", json={"name": "x", "data": "text"})
    _error(response, 400, "invalid_simulation_data")
    assert world.snapshot() == before


def test_body_over_limit_is_413(world: World) -> None:
    """A body over RIDECAST_MAX_BODY_BYTES is refused before it is parsed."""
    before = world.snapshot()
    _error(_post(world, b"[" + b" " * (1024 * 1024 + 10) + b"]"), 413, "payload_too_large")
    assert world.snapshot() == before


@pytest.mark.parametrize(
    "auth",
    [None, ("nobody", "rck_wrong"), "wrong-key-for-user"],
)
def test_bad_or_missing_key_is_401(world: World, auth: Any) -> None:
    """Missing credentials, an unknown key, or a key with another user's name: 401."""
    if auth == "wrong-key-for-user":
        other = world.server.create_user()
        auth = (world.user.name, other.key)
    with httpx.Client(base_url=world.server.base_url, auth=auth) as anon:
        response = anon.post(f"/api/v2/simulation/{world.sim}/events",
                             json=example_event("bookings", world.sim))
        code = "not_authenticated" if auth is None else "invalid_credentials"
        _error(response, 401, code)
        # Not Basic: a browser would keep the credentials (tests/api/test_cross_site.py).
        assert response.headers["www-authenticate"].startswith("Token")
    assert world.snapshot()[0]["meta"]["count"] == 1


def test_other_organisation_sees_404(world: World) -> None:
    """Another organisation's simulation does not exist for you, on every endpoint."""
    stranger = world.server.create_user()
    before = world.snapshot()
    with world.server.client(stranger) as http:
        base = f"/api/v2/simulation/{world.sim}"
        _error(http.get(base), 404, "simulation_not_found")
        _error(http.patch(base, json={"data": {}}), 404, "simulation_not_found")
        _error(http.delete(base), 404, "simulation_not_found")
        _error(http.get(f"{base}/events"), 404, "simulation_not_found")
        _error(http.post(f"{base}/events", json=example_event("bookings", world.sim)), 404,
               "simulation_not_found")
        listed = http.get("/api/v2/simulation").json()["objects"]
        assert world.sim not in [s["id"] for s in listed]
    assert world.snapshot() == before


def test_bad_cursor_and_unknown_type_filter(world: World) -> None:
    """after= must be an event_id and message_type a known type."""
    base = f"/api/v2/simulation/{world.sim}/events"
    _error(world.http.get(base, params={"after": "abc"}), 400, "invalid_cursor")
    _error(world.http.get(base, params={"message_type": "nope"}), 400, "unknown_message_type")
    _error(world.http.get(base, params={"limit": 0}), 400, "invalid_query")


def test_unknown_path_and_method(world: World) -> None:
    """Unknown endpoints and methods answer in the same error shape."""
    _error(world.http.get("/api/v2/nothing"), 404, "not_found")
    _error(world.http.put(f"/api/v2/simulation/{world.sim}", json={}), 405, "method_not_allowed")
