"""A token of GET /api/v2/user/token/ as a REST credential (``Authorization: Bearer``): what
the dashboard holds instead of the API key. It reads and acts as its user, cannot issue more
tokens, and stops working when its key is revoked."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from typing import Any

import httpx

from ridecast.events.examples import example_event
from tests.conftest import Server
from tests.waiting import eventually

WAIT_S = 10.0
"""Bound for another process's revocation to reach the server (its poll is 0.5 s)."""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_token_works_on_rest_as_its_user(server: Server) -> None:
    owner, stranger = server.create_user(), server.create_user()
    sim = server.create_simulation(owner)
    token = server.token(owner)
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        listed = http.get("/api/v2/simulation", headers=bearer(token))
        assert listed.status_code == 200
        assert [s["id"] for s in listed.json()["objects"]] == [sim]
        assert http.get(f"/api/v2/simulation/{sim}/simulator",
                        headers=bearer(token)).status_code == 200
        other = server.token(stranger)
        assert http.get(f"/api/v2/simulation/{sim}", headers=bearer(other)).status_code == 404


def test_a_token_cannot_issue_another(server: Server) -> None:
    token = server.token(server.create_user())
    answer = httpx.get(server.base_url + "/api/v2/user/token/", headers=bearer(token))
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_credentials"
    assert "API key" in answer.json()["error"]["message"]


def test_bad_bearer_tokens_are_401_with_their_code(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        malformed = http.get("/api/v2/simulation", headers=bearer("not-a-uuid"))
        unknown = http.get("/api/v2/simulation",
                           headers=bearer("00000000-0000-4000-8000-000000000000"))
    assert (malformed.status_code, malformed.json()["error"]["code"]) == (401, "token_malformed")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (401, "token_unknown")


def test_revoking_the_key_ends_the_session(server: Server) -> None:
    user = server.create_user()
    token = server.token(user)
    assert httpx.get(server.base_url + "/api/v2/simulation",
                     headers=bearer(token)).status_code == 200
    done = subprocess.run(
        [sys.executable, "-m", "ridecast.cli.main", "users", "revoke", user.name],
        env=server.env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert _refused_within(server, "/api/v2/simulation", token) == "token_unknown"


def _refused_within(server: Server, path: str, token: str,
                    body: dict[str, Any] | None = None) -> str:
    """Send ``token`` on ``path`` until it is refused (bounded); the refusal's code."""
    with httpx.Client(base_url=server.base_url, timeout=30) as http:

        def refusal() -> str | None:
            answer = (http.get(path, headers=bearer(token)) if body is None
                      else http.post(path, json=body, headers=bearer(token)))
            if answer.status_code == 401:
                return str(answer.json()["error"]["code"])
            assert answer.status_code in (200, 201), answer.text
            return None

        return eventually(refusal, timeout=WAIT_S, what="the revoked token refused")


def test_a_revoked_key_ends_its_token_on_ingest_too(server: Server) -> None:
    """A producer ingesting with a bearer token, whose answers the server reuses, is refused
    once another process revokes the key the token was issued from."""
    user = server.create_user()
    sim = server.create_simulation(user)
    token = server.token(user)
    event = example_event("vehicle_use", sim)
    path = f"/api/v2/simulation/{sim}/events"
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        for _ in range(5):  # the same connection, as a producer sends
            assert http.post(path, json=event, headers=bearer(token)).status_code == 201
    done = subprocess.run(
        [sys.executable, "-m", "ridecast.cli.main", "users", "revoke-key", user.name,
         _first_key_id(server, user.name)],
        env=server.env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert _refused_within(server, path, token, event) == "token_expired"


def _first_key_id(server: Server, name: str) -> str:
    import json

    done = subprocess.run(
        [sys.executable, "-m", "ridecast.cli.main", "users", "keys", name, "--json"],
        env=server.env, capture_output=True, text=True, timeout=60, check=True)
    return str(json.loads(done.stdout)[0]["id"])


def test_a_token_is_refused_from_its_expiry_on(start_server: Any) -> None:
    """A token used again and again is refused by the first request after its expiry,
    on ingest and on the rest of the API alike: reusing an answer never outlives it."""
    srv: Server = start_server({"RIDECAST_TOKEN_TTL_S": "2"})
    user = srv.create_user()
    sim = srv.create_simulation(user)
    with srv.client(user) as http:
        issued = http.get("/api/v2/user/token/")
    token = issued.json()["token"]
    expires = datetime.fromisoformat(issued.headers["X-Token-Expires-At"]).timestamp()
    event = example_event("vehicle_use", sim)
    path = f"/api/v2/simulation/{sim}/events"
    with httpx.Client(base_url=srv.base_url, timeout=30) as http:
        while time.time() < expires - 0.5:
            assert http.post(path, json=event, headers=bearer(token)).status_code == 201
            assert http.get("/api/v2/simulation", headers=bearer(token)).status_code == 200
            time.sleep(0.1)
        # The token's own deadline, not a guess.
        eventually(lambda: time.time() > expires, step=0.02, what="the token's expiry")
        late = http.post(path, json=event, headers=bearer(token))
        assert (late.status_code, late.json()["error"]["code"]) == (401, "token_expired")
        late = http.get("/api/v2/simulation", headers=bearer(token))
        assert (late.status_code, late.json()["error"]["code"]) == (401, "token_expired")
