"""No cross-site writes (issue 50): what a page of another site can make a browser send is
refused before it changes anything. A body not labelled JSON is 415, a state-changing
request from a foreign ``Origin`` 403 (the ingest hot path included), and a 401 does not
challenge with Basic, which would make a browser keep the credentials.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from ridecast.events.examples import example_event
from tests.conftest import Server

EVIL = "https://evil.example"


def _count(http: httpx.Client) -> int:
    return len(http.get("/api/v2/simulation?limit=1000").json()["objects"])


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    None,
])
def test_a_body_not_labelled_json_is_415_and_changes_nothing(server: Server,
                                                             content_type: str | None) -> None:
    """What an HTML form or a simple fetch sends: 415 unsupported_media_type, nothing
    created (simulations, events)."""
    user = server.create_user()
    sim = server.create_simulation(user)
    headers = {} if content_type is None else {"Content-Type": content_type}
    with server.client(user) as http:
        before = _count(http)
        for url, body in (("/api/v2/simulation", b'{"name": "n", "data": {}}'),
                          (f"/api/v2/simulation/{sim}/events",
                           httpx.Request("POST", "/", json=example_event("bookings", sim))
                           .content)):
            response = http.post(url, content=body, headers=headers)
            assert response.status_code == 415, response.text
            assert response.json()["error"]["code"] == "unsupported_media_type"
        assert _count(http) == before
        assert http.get(f"/api/v2/simulation/{sim}/events").json()["objects"] == []


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/merge-patch+json"])
def test_json_types_are_accepted(server: Server, content_type: str) -> None:
    """JSON, with parameters, in any case, and the +json types."""
    user = server.create_user()
    with server.client(user) as http:
        response = http.post("/api/v2/simulation", content=b'{"name": "n", "data": {}}',
                             headers={"Content-Type": content_type})
        assert response.status_code == 201, response.text


def test_a_post_without_a_body_needs_no_type(server: Server) -> None:
    """A POST that carries nothing (webhook_test, simulator/start) needs no Content-Type."""
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        response = http.post(f"/api/v2/simulation/{sim}/webhook_deliveries/retry_failed")
        assert response.status_code < 400, response.text


def _writes(sim: int) -> list[tuple[str, str, Any]]:
    return [
        ("POST", "/api/v2/simulation", {"name": "n", "data": {}}),
        ("PATCH", f"/api/v2/simulation/{sim}", {"name": "changed"}),
        ("POST", f"/api/v2/simulation/{sim}/events", example_event("bookings", sim)),
        ("POST", f"/api/v2/simulation/{sim}/simulator/start", None),
        ("DELETE", f"/api/v2/simulation/{sim}", None),
    ]


@pytest.mark.parametrize("origin", [EVIL, "null", "http://127.0.0.1:1"])
@pytest.mark.parametrize("case", range(5))
def test_a_foreign_origin_cannot_change_anything(server: Server, origin: str,
                                                 case: int) -> None:
    """Every kind of write from a page of another origin: 403 cross_origin_refused, and
    the simulation is as it was (no event, same name, not deleted, no run)."""
    user = server.create_user()
    sim = server.create_simulation(user)
    method, url, body = _writes(sim)[case]
    with server.client(user) as http:
        before = _count(http)
        response = http.request(method, url, json=body, headers={"Origin": origin})
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "cross_origin_refused"
        assert _count(http) == before
        got = http.get(f"/api/v2/simulation/{sim}")
        assert got.status_code == 200 and got.json()["name"] != "changed"
        assert http.get(f"/api/v2/simulation/{sim}/events").json()["objects"] == []
        assert http.get(f"/api/v2/simulation/{sim}/simulator").json()["status"] == "idle"


def test_the_servers_own_origin_may_write_and_anyone_may_read(server: Server) -> None:
    """The dashboard's own origin writes; a read from another origin is answered (no CORS
    header lets that page see it)."""
    user = server.create_user()
    with server.client(user) as http:
        own = http.post("/api/v2/simulation", json={"name": "n"},
                        headers={"Origin": server.base_url})
        assert own.status_code == 201, own.text
        read = http.get("/api/v2/simulation", headers={"Origin": EVIL})
        assert read.status_code == 200
        assert "access-control-allow-origin" not in read.headers


def test_an_allowed_origin_may_write(start_server: Callable[..., Server]) -> None:
    """RIDECAST_ALLOWED_ORIGINS lets the pages of the origins it lists write."""
    srv = start_server({"RIDECAST_ALLOWED_ORIGINS": '["https://ops.example.com/"]'})
    user = srv.create_user()
    sim = srv.create_simulation(user)
    with srv.client(user) as http:
        allowed = http.post(f"/api/v2/simulation/{sim}/events",
                            json=example_event("bookings", sim),
                            headers={"Origin": "https://OPS.example.com:443"})
        assert allowed.status_code == 201, allowed.text
        other = http.post("/api/v2/simulation", json={"name": "n"},
                          headers={"Origin": "https://ops.example.com.evil.example"})
        assert other.status_code == 403


def test_a_401_does_not_challenge_with_basic(server: Server) -> None:
    """A browser shown ``WWW-Authenticate: Basic`` asks for the credentials and sends them
    to this server from then on, from any site's page: the challenge names Token instead."""
    with httpx.Client(base_url=server.base_url, timeout=30) as anon:
        for response in (anon.get("/api/v2/simulation"),
                         anon.post("/api/v2/simulation/1/events", json={})):
            assert response.status_code == 401
            assert not response.headers["www-authenticate"].lower().startswith("basic")
            assert response.headers["www-authenticate"].startswith("Token")
