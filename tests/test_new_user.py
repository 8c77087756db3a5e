"""A new user's first minutes, over real sockets: CLI user, token, simulation, 18 events back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from ridecast.events import MessageType
from ridecast.events.examples import all_examples
from tests.conftest import launch_server


def test_new_user_posts_every_type_and_reads_them_back(tmp_path: Path) -> None:
    """ridecast serve + users create + token + simulation + 18 events, read back in order."""
    server = launch_server(tmp_path)
    try:
        created = subprocess.run(
            [sys.executable, "-m", "ridecast.cli.main", "users", "create", "ada", "--org", "acme"],
            env={**os.environ, "RIDECAST_DATABASE_URL": server.database_url},
            capture_output=True, text=True, check=True, cwd=tmp_path,
        )
        lines = created.stdout.splitlines()
        assert len(lines) == 1, "the API key is the only line on stdout"
        key = lines[0]
        with httpx.Client(base_url=server.base_url, auth=("ada", key)) as http:
            token = http.get("/api/v2/user/token/").json()
            assert list(token) == ["token"]
            sim = http.post("/api/v2/simulation", json={"name": "first", "data": {}}).json()["id"]
            sent = all_examples(sim)
            ids = []
            for event in sent:
                response = http.post(f"/api/v2/simulation/{sim}/events", json=event)
                assert response.status_code == 201, response.text
                ids += response.json()["event_ids"]
            got = http.get(f"/api/v2/simulation/{sim}/events", params={"limit": 100}).json()
    finally:
        server.stop()
    objects = got["objects"]
    assert [o["event_id"] for o in objects] == ids
    assert [int(i) for i in ids] == sorted(int(i) for i in ids)
    assert [o["message_type"] for o in objects] == [t.value for t in MessageType]
    for stored, original in zip(objects, sent, strict=True):
        assert stored["data"] == original["data"]
        assert stored["current_sim_ts"] == original["current_sim_ts"]
        assert stored["simulation_id"] == sim
        if original["message_type"] == "gps_data":
            assert "server_ts" not in stored
        else:
            assert stored["server_ts"] == original["server_ts"]


def test_server_ts_is_filled_when_missing(server: object) -> None:
    """An event posted without server_ts gets the server's time, with an offset."""
    from datetime import datetime

    from tests.conftest import Server

    assert isinstance(server, Server)
    user = server.create_user()
    sim = server.create_simulation(user)
    event = all_examples(sim)[0]
    del event["server_ts"]
    with server.client(user) as http:
        http.post(f"/api/v2/simulation/{sim}/events", json=event).raise_for_status()
        stored = http.get(f"/api/v2/simulation/{sim}/events").json()["objects"][0]
    assert datetime.fromisoformat(stored["server_ts"]).tzinfo is not None
