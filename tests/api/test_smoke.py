"""A first real-socket check of the core: token, simulation, ingest, history."""

from __future__ import annotations

from tests.conftest import Server


def test_token_then_event_round_trip(server: Server) -> None:
    """A posted event comes back from the history endpoint with an event_id."""
    user = server.create_user()
    token = server.token(user)
    assert len(token) == 36
    sim = server.create_simulation(user)
    event = {
        "agent_type": "vehicle", "message_type": "vehicle_use",
        "data": {"vehicle_id": 7, "action": "disabled"},
        "current_sim_ts": "2026-11-22T03:00:00+00:00", "transmit_to_websocket": True,
    }
    with server.client(user) as http:
        posted = http.post(f"/api/v2/simulation/{sim}/events", json=event)
        assert posted.status_code == 201, posted.text
        history = http.get(f"/api/v2/simulation/{sim}/events").json()
    assert [e["event_id"] for e in history["objects"]] == posted.json()["event_ids"]
    assert history["objects"][0]["data"] == event["data"]
