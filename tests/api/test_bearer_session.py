"""A token of GET /api/v2/user/token/ as a REST credential (``Authorization: Bearer``): what
the dashboard holds instead of the API key. It reads and acts as its user, cannot issue more
tokens, and stops working when its key is revoked."""

from __future__ import annotations

import subprocess
import sys

import httpx

from tests.conftest import Server


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
    answer = httpx.get(server.base_url + "/api/v2/simulation", headers=bearer(token))
    assert answer.status_code == 401
