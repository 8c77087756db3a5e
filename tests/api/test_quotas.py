"""The quotas on the embedded default (one ``ridecast serve`` on SQLite, counts in the
process): the same refusals as on a cluster (tests/cluster/test_quotas.py), nothing of a
refused run started, the stored bytes recounted from the store after a restart, and the
4xx codes listed in /openapi.json for the operations that can meet them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Server, launch_server
from tests.hub.wsutil import envelope

SLOW = {"seed": 3, "vehicles": 5, "speed": 1, "duration_s": 7200, "network": "straight",
        "bookings_per_hour": 0}


def _error(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["error"]
    return body


def _rows(srv: Server, sim: int) -> tuple[int, int, int]:
    """The simulation's lease rows, journal entries and events in the SQLite file."""
    path = srv.database_url.split("///", 1)[1]
    with sqlite3.connect(path) as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT count(*) FROM {table} WHERE simulation_id = ?",
                         (sim,)).fetchone()[0]
            for table in ("simulator_runs", "simulator_journal", "events"))


def test_a_refused_start_starts_nothing_on_sqlite(tmp_path: Path) -> None:
    """With one run allowed, the second start is 429 quota_runs: no lease row, no journal,
    no event, status idle; stopping the first lets it start."""
    srv = launch_server(tmp_path, {"RIDECAST_QUOTA_RUNS_PER_ORG": "1"})
    try:
        user = srv.create_user()
        first, second = (srv.create_simulation(user, {"simulator": SLOW}) for _ in range(2))
        with srv.client(user) as http:
            assert http.post(f"/api/v2/simulation/{first}/simulator/start").status_code == 200
            refused = http.post(f"/api/v2/simulation/{second}/simulator/start")
            assert refused.status_code == 429
            assert _error(refused)["code"] == "quota_runs"
            assert _error(refused)["details"] == [{"quota": "quota_runs", "limit": 1,
                                                   "used": 1}]
            assert _rows(srv, second) == (0, 0, 0)
            assert http.get(f"/api/v2/simulation/{second}/simulator").json()["status"] == "idle"
            assert http.post(f"/api/v2/simulation/{first}/simulator/stop").status_code == 200
            assert http.post(f"/api/v2/simulation/{second}/simulator/start").status_code == 200
    finally:
        srv.stop()


def test_stored_bytes_are_refused_and_recounted_after_a_restart(tmp_path: Path) -> None:
    """Batches fill the organisation's bytes; the next is 403 quota_event_bytes and stores
    nothing; after a restart (counts in memory are gone) the store's recount still refuses;
    the ingest fast path and the full path answer the same."""
    env = {"RIDECAST_QUOTA_EVENT_BYTES_PER_ORG": "8000"}
    srv = launch_server(tmp_path, env)
    try:
        user = srv.create_user()
        sim = srv.create_simulation(user)
        batch = [envelope(sim, "vehicle_use", i) for i in range(10)]
        with srv.client(user) as http:
            while (response := http.post(f"/api/v2/simulation/{sim}/events",
                                         json=batch)).status_code == 201:
                pass
            assert response.status_code == 403
            assert _error(response)["code"] == "quota_event_bytes"
            held = _rows(srv, sim)[2]
            assert held % len(batch) == 0 and held > 0
        port = srv.port
        srv.stop()
        srv = launch_server(tmp_path, env, database_url=srv.database_url, port=port)
        with srv.client(user) as http:
            response = http.post(f"/api/v2/simulation/{sim}/events", json=batch)
            assert response.status_code == 403, response.text
            assert _error(response)["code"] == "quota_event_bytes"
        assert _rows(srv, sim)[2] == held
    finally:
        srv.stop()


def test_openapi_lists_the_quota_refusals(tmp_path: Path) -> None:
    """Start, create, ingest and operations document 403 (and 429) with the quota codes."""
    srv = launch_server(tmp_path)
    try:
        doc = httpx.get(f"{srv.base_url}/openapi.json").json()
    finally:
        srv.stop()
    paths = doc["paths"]
    for path in ("/api/v2/simulation", "/api/v2/simulation_template",
                 "/api/v2/simulation/{simulation_id}/events",
                 "/api/v2/simulation/{simulation_id}/simulator/start",
                 "/api/v2/simulation/{simulation_id}/bookings"):
        responses = paths[path]["post"]["responses"]
        assert "quota_" in responses["403"]["description"], path
        assert "429" in responses
    assert "quota_runs" in paths["/api/v2/simulation/{simulation_id}/simulator/start"][
        "post"]["responses"]["429"]["description"]
    assert "403" not in paths["/api/v2/simulation/{simulation_id}/simulator"]["get"][
        "responses"]
