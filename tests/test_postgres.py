"""The same core flow on PostgreSQL: migrations, group commit, history and bad input.

Skipped when no PostgreSQL answers on 127.0.0.1:5432 (CI starts one).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from ridecast.events.examples import all_examples
from tests.conftest import launch_server


def test_core_flow_on_postgres(tmp_path: Path, pg_url: str) -> None:
    """Users, token, simulation, a batch of 18 events and a rejected batch, on PostgreSQL."""
    server = launch_server(tmp_path, database_url=pg_url)
    try:
        user = server.create_user()
        sim = server.create_simulation(user)
        with httpx.Client(base_url=server.base_url, auth=user.auth) as http:
            assert http.get("/api/v2/user/token/").status_code == 200
            posted = http.post(f"/api/v2/simulation/{sim}/events", json=all_examples(sim))
            assert posted.status_code == 201, posted.text
            bad = all_examples(sim)
            bad[3]["data"] = {}
            assert http.post(f"/api/v2/simulation/{sim}/events", json=bad).status_code == 400
            got = http.get(f"/api/v2/simulation/{sim}/events").json()
            etag = http.get(f"/api/v2/simulation/{sim}").headers["etag"]
            assert http.patch(f"/api/v2/simulation/{sim}", json={"data": {"a": 1}},
                              headers={"If-Match": etag}).status_code == 200
            assert http.patch(f"/api/v2/simulation/{sim}", json={"data": {}},
                              headers={"If-Match": etag}).status_code == 412
    finally:
        server.stop()
    assert [e["event_id"] for e in got["objects"]] == posted.json()["event_ids"]
    assert len(got["objects"]) == 18
