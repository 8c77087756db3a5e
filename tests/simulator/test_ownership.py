"""Simulator ownership across real ``ridecast serve`` processes on one PostgreSQL database.

With the in-process bus two processes cannot forward to each other; they still share the
leases: status is readable from both, a forwarded command answers 503 with Retry-After, and
when the owner is killed the other node takes the run over.
With the Redis bus (skipped until ``ridecast.bus.redis`` exists) commands sent to either
node control the run.
"""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, User, launch_server, launch_servers, spawn_server
from tests.waiting import eventually

DATA = {"simulator": {"seed": 3, "vehicles": 3, "speed": 1, "bookings_per_hour": 0,
                      "duration_s": 3600, "vehicle_break_probability": 0,
                      "no_show_probability": 0,
                      "area": {"lat": 52.52, "lon": 13.405, "radius_m": 300}}}
TRIP = {"pickup_lat": 52.52, "pickup_lon": 13.405, "dropoff_lat": 52.525, "dropoff_lon": 13.42}
ENV = {"RIDECAST_SIMULATOR_LEASE_S": "1", "RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S": "0.5"}


def _two_nodes(tmp_path: Path, database_url: str,
               env: dict[str, str]) -> tuple[Server, Server]:
    """Nodes A and B on one store, started together (their start-ups overlap)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = launch_servers(
        lambda: spawn_server(tmp_path / "a", {**ENV, **env}, database_url=database_url),
        lambda: spawn_server(tmp_path / "b", {**ENV, **env}, database_url=database_url))
    return a, b


def _call(server: Server, user: User, method: str, path: str,
          json: Any = None) -> httpx.Response:
    with server.client(user) as http:
        return http.request(method, path, json=json)


def _status(server: Server, user: User, sim: int) -> dict[str, Any]:
    body: dict[str, Any] = _call(server, user, "GET", f"/api/v2/simulation/{sim}/simulator").json()
    return body


def _events(server: Server, user: User, sim: int) -> list[dict[str, Any]]:
    with server.client(user) as http:
        page = http.get(f"/api/v2/simulation/{sim}/events", params={"limit": 1000}).json()
    objects: list[dict[str, Any]] = page["objects"]
    assert len(objects) < 1000
    return objects


def test_a_killed_owner_s_run_is_taken_over_by_the_other_node(
        tmp_path: Path, pg_url: str) -> None:
    """Start on A and book; B reads running, owned by A; B's pause (no bus between them) is
    a 503 with Retry-After; after kill -9 of A, B takes the run over once A's lease has
    passed (it reads pending meanwhile, never interrupted): same run, same booking, and B
    controls it."""
    a, b = _two_nodes(tmp_path, pg_url, {})
    try:
        user = a.create_user()
        sim = a.create_simulation(user, DATA)
        base = f"/api/v2/simulation/{sim}/simulator"
        started = _call(a, user, "POST", base + "/start")
        assert started.status_code == 200, started.text
        owner_a = started.json()["owner_node"]
        booked = _call(a, user, "POST", f"/api/v2/simulation/{sim}/bookings", TRIP)
        assert booked.status_code == 201, booked.text
        on_b = _status(b, user, sim)
        assert on_b["status"] == "running" and on_b["owner_node"] == owner_a
        refused = _call(b, user, "POST", base + "/pause")
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "simulator_owner_unreachable"
        assert int(refused.headers["retry-after"]) >= 1
        a.stop(signal.SIGKILL)
        def taken_over() -> dict[str, Any] | None:
            status = _status(b, user, sim)
            assert status["status"] == "running", status
            done = status["owner_node"] not in (None, owner_a) and status["takeover"] is None
            return status if done else None

        status = eventually(taken_over, step=0.1, what="another node owning the run",
                            why=lambda: _status(b, user, sim))
        assert status["kpis"]["bookings"] == 1
        assert _call(b, user, "POST", base + "/pause").json()["status"] == "paused"
        assert _status(b, user, sim)["status"] == "paused"
    finally:
        a.stop()
        b.stop()


def test_a_clean_shutdown_hands_the_run_to_the_next_process(tmp_path: Path) -> None:
    """One process on SQLite (the embedded default): SIGTERM while a run is running; it
    reads as being taken over at once (not after the hour-long lease), and the next process
    on the same file takes it over: the same run (its booking), its clock gone on."""
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    url = f"sqlite+aiosqlite:///{tmp_path / 'one.db'}"
    env = {"RIDECAST_SIMULATOR_LEASE_S": "3600"}
    first = launch_server(first_dir, env, database_url=url)
    try:
        user = first.create_user()
        sim = first.create_simulation(user, DATA)
        base = f"/api/v2/simulation/{sim}/simulator"
        assert _call(first, user, "POST", base + "/start").status_code == 200
        assert _call(first, user, "POST", f"/api/v2/simulation/{sim}/bookings",
                     TRIP).status_code == 201
        before = _status(first, user, sim)
    finally:
        first.stop()  # SIGTERM: uvicorn shuts down cleanly, then re-raises the signal
    second = launch_server(second_dir, env, database_url=url)
    try:
        def resumed() -> dict[str, Any] | None:
            status = _status(second, user, sim)
            if status.get("owner_node") is not None and status.get("takeover") is None:
                return status
            assert status["status"] == "running" and status["takeover"] in (
                "pending", "replaying"), status
            return None

        status = eventually(resumed, step=0.1, what="the second node owning the run",
                            why=lambda: _status(second, user, sim))
        assert status["status"] == "running"
        assert status["owner_node"] != before["owner_node"]
        assert status["started_sim_ts"] == before["started_sim_ts"]
        assert status["sim_ts"] > before["sim_ts"]
        assert status["kpis"]["bookings"] == 1
        assert _call(second, user, "POST", base + "/start").status_code == 409
    finally:
        second.stop()


def test_a_run_started_on_a_is_controlled_through_b(tmp_path: Path, pg_url: str) -> None:
    """With the Redis bus: start through A; book, pause, resume and stop through B; status
    agrees on both nodes; the owner's errors come back through B unchanged."""
    pytest.importorskip("ridecast.bus.redis",
                        reason="needs the Redis bus (ridecast.bus.redis), not on this branch")
    a, b = _two_nodes(tmp_path, pg_url, {"RIDECAST_BUS_URL": "redis://127.0.0.1:6379/0",
                                          "RIDECAST_BUS_PREFIX": f"test-{uuid.uuid4().hex}",
                                          "RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S": "10"})
    try:
        user = a.create_user()
        sim = a.create_simulation(user, DATA)
        base = f"/api/v2/simulation/{sim}"
        assert _call(a, user, "POST", base + "/simulator/start").status_code == 200
        booked = _call(b, user, "POST", base + "/bookings", TRIP)
        assert booked.status_code == 201, booked.text
        assert booked.json()["published"][0] == "bookings"
        unknown = _call(b, user, "POST", base + "/offers/424242/accept")
        assert unknown.json() == _call(a, user, "POST", base + "/offers/424242/accept").json()
        assert _call(b, user, "POST", base + "/simulator/pause").json()["status"] == "paused"
        assert _status(a, user, sim)["status"] == "paused"
        assert _status(b, user, sim)["status"] == "paused"
        assert _call(b, user, "POST", base + "/simulator/start").status_code == 409
        assert _call(b, user, "POST", base + "/simulator/resume").json()["status"] == "running"
        stopped = _call(b, user, "POST", base + "/simulator/stop").json()
        assert stopped["status"] == "stopped" and stopped["kpis"]["bookings"] == 1
        assert _status(b, user, sim)["status"] == "stopped"
    finally:
        a.stop()
        b.stop()


def test_a_paused_run_is_taken_over_paused_where_it_stood(tmp_path: Path) -> None:
    """SIGTERM with the run paused; the next process takes it over still paused, at the
    same simulated time, having published nothing more; resumed, its stream goes on with no
    event twice."""
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    url = f"sqlite+aiosqlite:///{tmp_path / 'one.db'}"
    # A fixed start in the morning peak: the run's events depend on its simulated hour, and
    # at night three idle vehicles publish nothing but equal snapshots.
    data = {"simulator": {**DATA["simulator"], "speed": 20, "bookings_per_hour": 200,
                          "start_ts": "2026-11-28T08:00:00+00:00"}}
    first = launch_server(first_dir, database_url=url)
    try:
        user = first.create_user()
        sim = first.create_simulation(user, data)
        base = f"/api/v2/simulation/{sim}/simulator"
        assert _call(first, user, "POST", base + "/start").status_code == 200
        eventually(lambda: len(_events(first, user, sim)) >= 4, step=0.1,
                   what="the first snapshot and some bookings")
        paused = _call(first, user, "POST", base + "/pause").json()
        assert paused["status"] == "paused"
        events_before = _events(first, user, sim)
    finally:
        first.stop()
    second = launch_server(second_dir, database_url=url)
    try:
        status = eventually(
            lambda: (s := _status(second, user, sim)).get("owner_node") is not None
            and s.get("takeover") is None and s, step=0.1,
            what="the second node owning the run", why=lambda: _status(second, user, sim))
        assert status["status"] == "paused"
        assert status["sim_ts"] == paused["sim_ts"]
        same = _events(second, user, sim)
        assert same == events_before  # nothing published twice, nothing new while paused
        assert _call(second, user, "POST", base + "/resume").json()["status"] == "running"
        after = eventually(lambda: (e := _events(second, user, sim))
                           and len(e) > len(events_before) + 5 and e, step=0.2,
                           what="more than five new events after resume")
        assert after[:len(events_before)] == events_before
        assert min(e["current_sim_ts"] for e in after[len(events_before):]) >= paused["sim_ts"]
        # Two snapshots of idle vehicles a minute apart can be equal: an event is its time too.
        keys = [(e["message_type"], e["current_sim_ts"], json.dumps(e["data"], sort_keys=True))
                for e in after]
        assert len(set(keys)) == len(keys), [k for k in keys if keys.count(k) > 1]
    finally:
        second.stop()
