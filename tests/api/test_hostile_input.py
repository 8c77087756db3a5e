"""Hostile input never gets a 5xx, is refused with a precise 400, and stores nothing.

Regression tests of issue 13's defects 1, 2, 3, 5 and 6, against a real server.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from ridecast.events.examples import example_event
from tests.conftest import Server, User

INT64_MAX = 2**63 - 1


def deep_json(levels: int) -> str:
    """``deep(levels)`` as JSON text, built by hand: json.dumps itself recurses."""
    return '{"a":' * levels + "1" + "}" * levels


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def _limit_error(response: httpx.Response, field_prefix: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "json_limit_exceeded"
    assert error["details"][0]["field"].startswith(field_prefix), error


def _counts(http: httpx.Client) -> tuple[int, int]:
    sims = http.get("/api/v2/simulation")
    templates = http.get("/api/v2/simulation_template")
    assert sims.status_code == 200 and templates.status_code == 200
    return sims.json()["meta"]["total_count"], len(templates.json()["objects"])


@pytest.mark.parametrize("levels", [33, 300, 5000])
def test_deep_data_is_refused_everywhere_and_stores_nothing(server: Server, levels: int) -> None:
    """A data 300 levels deep is a 400 naming the field on every write; listings stay up."""
    user = server.create_user()
    sim = server.create_simulation(user, {"keep": "me"})
    body = '{"name": "deep", "data": ' + deep_json(levels) + "}"
    with server.client(user, headers={"Content-Type": "application/json"}) as http:
        before = _counts(http)
        for method, path in (
            ("POST", "/api/v2/simulation"),
            ("PATCH", f"/api/v2/simulation/{sim}"),
            ("POST", "/api/v2/simulation_template"),
        ):
            response = http.request(method, path, content=body)
            if levels > 1000:  # too deep to even parse: refused at the body
                assert response.status_code == 400, response.text
                assert response.json()["error"]["code"] in ("json_limit_exceeded", "invalid_json")
            else:
                _limit_error(response, "body.data.a.a")
        event = json.dumps(example_event("bookings", sim))
        event = event[:-1] + ', "extra": ' + deep_json(levels) + "}"
        response = http.post(f"/api/v2/simulation/{sim}/events", content=event)
        assert response.status_code == 400, response.text
        assert _counts(http) == before
        assert http.get(f"/api/v2/simulation/{sim}").json()["data"] == {"keep": "me"}
        assert http.get(f"/api/v2/simulation/{sim}/events").json()["objects"] == []


def test_nesting_at_the_limit_is_accepted(server: Server) -> None:
    """32 levels (the documented default) are fine, and read back unchanged."""
    user = server.create_user()
    with server.client(user) as http:
        data = deep(31)  # data itself is one level below the body object
        response = http.post("/api/v2/simulation", json={"name": "ok", "data": data})
        assert response.status_code == 201, response.text
        assert http.get(f"/api/v2/simulation/{response.json()['id']}").json()["data"] == data


def test_long_strings_are_refused(server: Server) -> None:
    """A string over RIDECAST_MAX_JSON_STRING (64 Ki characters) is a 400 naming it."""
    user = server.create_user()
    with server.client(user) as http:
        response = http.post("/api/v2/simulation",
                             json={"name": "s", "data": {"note": "x" * 70_000}})
        _limit_error(response, "body.data.note")


@pytest.mark.parametrize("number", [2**63, -(2**63) - 1, 10**30, 2**64 - 1])
def test_integers_beyond_64_bits_in_bodies(server: Server, number: int) -> None:
    """An integer outside the signed 64-bit range in any body is a 400, never a 500."""
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user, headers={"Content-Type": "application/json"}) as http:
        response = http.post("/api/v2/simulation",
                             content=f'{{"name": "n", "template_id": {number}}}')
        assert response.status_code == 400, response.text
        response = http.post("/api/v2/simulation",
                             content=f'{{"name": "n", "data": {{"n": {number}}}}}')
        _limit_error(response, "body.data.n")
        event = example_event("vehicle_use", sim)
        raw = json.dumps(event).replace('"vehicle_id": ', f'"vehicle_id": {number}, "x": ', 1)
        response = http.post(f"/api/v2/simulation/{sim}/events", content=raw)
        assert response.status_code == 400, response.text


def test_integers_beyond_64_bits_in_paths_and_queries(server: Server) -> None:
    """Every operation with an integer path parameter answers 2**63 with a 4xx."""
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        schema = http.get("/openapi.json").json()
        tried = 0
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                ints = [p["name"] for p in operation.get("parameters", [])
                        if p["in"] == "path" and p["schema"].get("type") == "integer"]
                if not ints:
                    continue
                for big in ("9223372036854775808", "100000000000000000000000000000"):
                    url = path
                    for name in ints:
                        url = url.replace("{" + name + "}", big)
                    response = http.request(method.upper(), url, json={})
                    assert 400 <= response.status_code < 500, (method, url, response.text)
                    tried += 1
        assert tried >= 30
        for query in ("after=1000000000000000000000000000000", "after=9223372036854775808"):
            response = http.get(f"/api/v2/simulation/{sim}/events?{query}")
            assert response.status_code == 400, response.text
            assert response.json()["error"]["code"] == "invalid_cursor"
        response = http.get("/api/v2/simulation?offset=100000000000000000000000")
        assert response.status_code == 400, response.text
        assert response.json()["error"]["details"][0]["field"] == "query.offset"


def test_an_unexpected_error_is_one_500_and_the_connection_stays_usable(
    start_server: Any,
) -> None:
    """A row the server cannot read gives a 500 with a request id; keep-alive survives."""
    srv: Server = start_server()
    user = srv.create_user()
    sim = srv.create_simulation(user, {"fine": True})
    database = srv.database_url.split("///", 1)[1]
    with sqlite3.connect(database) as db:  # a corrupt row, as a disk or a bad tool leaves it
        db.execute("UPDATE simulations SET data = ? WHERE id = ?", ("{not json", sim))
    transport = httpx.HTTPTransport(retries=0)
    with httpx.Client(base_url=srv.base_url, auth=user.auth, transport=transport) as http:
        response = http.get(f"/api/v2/simulation/{sim}")
        assert response.status_code == 500
        error = response.json()["error"]
        assert error["code"] == "internal_error"
        request_id = response.headers["X-Request-Id"]
        assert error["details"] == [{"request_id": request_id}]
        # The same keep-alive connection answers the next request.
        assert response.headers.get("connection", "").lower() != "close"
        again = http.get("/api/v2/user/token/")
        assert again.status_code == 200
    logs = srv.logs()
    assert request_id in logs and "Traceback" in logs


def test_no_token_or_key_reaches_the_log(start_server: Any) -> None:
    """Tokens in websocket URLs and keys in query strings are redacted in every log line,
    the access log's included (off by default, so turned on here)."""
    srv: Server = start_server({"RIDECAST_LOG_LEVEL": "info", "RIDECAST_ACCESS_LOG": "true"})
    user = srv.create_user()
    token = srv.token(user)
    sim = srv.create_simulation(user)

    async def stream() -> None:
        async with connect(f"{srv.ws_url}/simulation_events/{sim}?token={token}"):
            pass

    asyncio.run(stream())
    with httpx.Client(base_url=srv.base_url, auth=user.auth) as http:
        http.get(f"/api/v2/simulation?token={user.key}&api_key={user.key}")
    logs = srv.logs()
    assert "[redacted]" in logs
    assert token not in logs
    assert user.key not in logs
    assert not re.search(r"token=[0-9a-f]{8}-", logs)


def test_an_empty_token_parameter_does_not_hide_the_header(server: Server) -> None:
    """``?token=`` (empty) is absent: the Authorization header's token is used."""
    user: User = server.create_user()
    token = server.token(user)
    sim = server.create_simulation(user)

    async def stream() -> str:
        url = f"{server.ws_url}/simulation_events/{sim}?token="
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            with server.client(user) as http:
                http.post(f"/api/v2/simulation/{sim}/events",
                          json=example_event("vehicle_use", sim))
            return str(await asyncio.wait_for(ws.recv(), 10))

    assert json.loads(asyncio.run(stream()))["message_type"] == "vehicle_use"
