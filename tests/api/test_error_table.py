"""docs/errors.md walked against a real server: each row's HTTP status and close code.

The table is read from the Markdown a user reads (tests/test_reference_docs.py keeps it equal
to ``ridecast.errors``). Every row has a request here that provokes it, over HTTP and over a
websocket, or a line in ``NOT_WALKED`` saying why not and which test provokes it instead; a
row added, removed or changed without the server following fails here. Query parameters are
walked on every operation of /openapi.json: a wrong value is ``invalid_query`` (or the row
that names the parameter: ``after`` is ``invalid_cursor``, ``message_type``
``unknown_message_type``).
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ridecast.events.examples import example_event
from tests.conftest import Server, User, launch_server
from tests.hub.wsutil import open_stream, refusal

ERRORS_MD = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
ROW = re.compile(r"^\| `(?P<code>[a-z_]+)` \| (?P<http>\d+|—) \| (?P<ws>\d+|—) \| ")


@dataclass(frozen=True)
class Row:
    code: str
    http_status: int | None
    close_code: int | None


def table() -> dict[str, Row]:
    """The rows of docs/errors.md, by code."""
    rows: dict[str, Row] = {}
    for line in ERRORS_MD.read_text().splitlines():
        match = ROW.match(line)
        if match:
            http, ws = match["http"], match["ws"]
            rows[match["code"]] = Row(match["code"], None if http == "—" else int(http),
                                      None if ws == "—" else int(ws))
    return rows


@dataclass
class World:
    """A server of this module's own, one user, a simulation of theirs with one event."""

    server: Server
    user: User
    sim: int
    http: httpx.Client

    def token(self) -> str:
        return self.server.token(self.user)

    def ws(self, path: str) -> str:
        return f"{self.server.ws_url}/simulation_events/{path}"


# Small limits, so that the rows behind them are reached in a few requests; nothing else in
# this module comes near them (each request that fails authentication uses a fresh name).
ENV = {
    "RIDECAST_AUTH_FAILURES_PER_USER": "2",
    "RIDECAST_WS_MAX_STREAMS_PER_TOKEN": "1",
    "RIDECAST_WEBHOOK_WORKERS": "false",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    srv = launch_server(tmp_path_factory.mktemp("errors"), ENV)
    try:
        user = srv.create_user()
        sim = srv.create_simulation(user)
        with srv.client(user) as http:
            posted = http.post(f"/api/v2/simulation/{sim}/events",
                               json=example_event("bookings", sim))
            assert posted.status_code == 201, posted.text
            yield World(srv, user, sim, http)
    finally:
        srv.stop()


def _nobody() -> tuple[str, str]:
    # A fresh name each time: failures are counted per user name, and the module's user
    # must never be throttled.
    return (f"nobody-{uuid.uuid4().hex[:8]}", "wrong-key")


def _anonymous(w: World, headers: dict[str, str] | None = None,
               auth: tuple[str, str] | None = None) -> httpx.Response:
    with httpx.Client(base_url=w.server.base_url, timeout=30) as http:
        return http.get("/api/v2/simulation", headers=headers, auth=auth)


def _not_owner(w: World) -> httpx.Response:
    """A member of the user's organisation deletes the user's template."""
    template = w.http.post("/api/v2/simulation_template", json={"name": "t"}).json()["id"]
    member = w.server.create_user(w.user.org)
    with w.server.client(member) as http:
        return http.delete(f"/api/v2/simulation_template/{template}")


def _throttled(w: World) -> httpx.Response:
    name, key = _nobody()
    with httpx.Client(base_url=w.server.base_url, timeout=30) as http:
        for _ in range(int(ENV["RIDECAST_AUTH_FAILURES_PER_USER"]) + 1):
            response = http.get("/api/v2/simulation", auth=(name, key))
            if response.status_code == 429:
                break
    return response


def _corrupt(w: World) -> httpx.Response:
    # A row the server cannot read, as a disk or a bad tool leaves it: of a user of its own,
    # so that the module's user still lists theirs.
    other = w.server.create_user()
    sim = w.server.create_simulation(other)
    database = w.server.database_url.split("///", 1)[1]
    with sqlite3.connect(database) as db:
        db.execute("UPDATE simulations SET data = ? WHERE id = ?", ("{not json", sim))
    with w.server.client(other) as http:
        return http.get(f"/api/v2/simulation/{sim}")


def _mismatch(w: World) -> httpx.Response:
    return w.http.post(f"/api/v2/simulation/{w.sim}/events",
                       json=example_event("bookings", w.sim + 1000))


def _stale_etag(w: World) -> httpx.Response:
    return w.http.patch(f"/api/v2/simulation/{w.sim}", json={"name": "renamed"},
                        headers={"If-Match": '"no-such-version"'})


HTTP_RECIPES: dict[str, Callable[[World], httpx.Response]] = {
    "invalid_json": lambda w: w.http.post(
        "/api/v2/simulation", content=b'{"name": ', headers={"Content-Type": "application/json"}),
    "validation_error": lambda w: w.http.post("/api/v2/simulation", json={"data": {}}),
    "unknown_message_type": lambda w: w.http.get(
        f"/api/v2/simulation/{w.sim}/events", params={"message_type": "nope"}),
    "simulation_id_mismatch": _mismatch,
    "invalid_simulation_data": lambda w: w.http.post(
        "/api/v2/simulation", json={"name": "n", "data": [1, 2]}),
    "webhook_target_refused": lambda w: w.http.patch(
        f"/api/v2/simulation/{w.sim}",
        json={"data": {"messaging_webhook_url": "http://169.254.169.254/latest"}}),
    "invalid_cursor": lambda w: w.http.get(
        f"/api/v2/simulation/{w.sim}/events", params={"after": "abc"}),
    "invalid_query": lambda w: w.http.get("/api/v2/simulation", params={"limit": "abc"}),
    "json_limit_exceeded": lambda w: w.http.post(
        "/api/v2/simulation", content=b'{"name": "n", "data": ' + b"[" * 40 + b"]" * 40 + b"}",
        headers={"Content-Type": "application/json"}),
    "unsupported_character": lambda w: w.http.post(
        "/api/v2/simulation", json={"name": "a\x00b"}),
    "cross_origin_refused": lambda w: w.http.post(
        "/api/v2/simulation", json={"name": "n"}, headers={"Origin": "https://evil.example"}),
    "unsupported_media_type": lambda w: w.http.post(
        "/api/v2/simulation", content=b'{"name": "n"}', headers={"Content-Type": "text/plain"}),
    "not_authenticated": lambda w: _anonymous(w),
    "invalid_credentials": lambda w: _anonymous(w, auth=_nobody()),
    "token_malformed": lambda w: _anonymous(w, {"Authorization": "Bearer not-a-uuid"}),
    "token_unknown": lambda w: _anonymous(w, {"Authorization": f"Bearer {uuid.uuid4()}"}),
    "simulation_not_found": lambda w: w.http.get("/api/v2/simulation/999999999"),
    "not_found": lambda w: w.http.get("/api/v2/no_such_thing"),
    "template_not_found": lambda w: w.http.get("/api/v2/simulation_template/999999999"),
    "delivery_not_found": lambda w: w.http.post(
        f"/api/v2/simulation/{w.sim}/webhook_deliveries/999999999/retry"),
    "method_not_allowed": lambda w: w.http.put(f"/api/v2/simulation/{w.sim}", json={}),
    "invalid_state": lambda w: w.http.post(f"/api/v2/simulation/{w.sim}/simulator/pause"),
    "precondition_failed": _stale_etag,
    "payload_too_large": lambda w: w.http.post(
        "/api/v2/simulation", content=b" " * (1024 * 1024 + 1),
        headers={"Content-Type": "application/json"}),
    "headers_too_large": lambda w: w.http.get(
        "/api/v2/simulation", headers={"X-Big": "a" * (64 * 1024 + 1)}),
    "not_owner": _not_owner,
    "too_many_requests": _throttled,
    "internal_error": _corrupt,
}

WS_RECIPES: dict[str, Callable[[World], str]] = {
    "not_authenticated": lambda w: w.ws(""),
    "token_malformed": lambda w: w.ws("?token=not-a-uuid"),
    "token_unknown": lambda w: w.ws(f"?token={uuid.uuid4()}"),
    "unknown_event_type": lambda w: w.ws(f"no_such_type?token={w.token()}"),
    "simulation_not_found": lambda w: w.ws(f"999999999?token={w.token()}"),
    "malformed_path": lambda w: w.ws(f"1/2?token={w.token()}"),
    "invalid_cursor": lambda w: w.ws(f"?token={w.token()}&since=abc"),
}

# Rows that one request to one healthy server cannot provoke, each with the reason and the
# test that provokes it instead. Keyed (code, "http" | "ws").
NOT_WALKED: dict[tuple[str, str], str] = {
    ("access_revoked", "http"): "a stream's own refusal: revocation while it is open "
    "(tests/auth/test_revocation.py)",
    ("access_revoked", "ws"): "needs a revocation while the stream is open "
    "(tests/auth/test_revocation.py)",
    ("token_expired", "http"): "needs a token to outlive RIDECAST_TOKEN_TTL_S "
    "(tests/hub/test_refusals.py)",
    ("token_expired", "ws"): "needs a token to outlive RIDECAST_TOKEN_TTL_S "
    "(tests/hub/test_refusals.py)",
    ("unknown_event_type", "http"): "a websocket path's refusal; REST paths have no type",
    ("malformed_path", "http"): "a websocket path's refusal; a wrong REST path is not_found",
    ("cursor_expired", "http"): "needs the retention sweep to drop events "
    "(tests/hub/test_flow.py)",
    ("cursor_expired", "ws"): "needs the retention sweep to drop events "
    "(tests/hub/test_flow.py)",
    ("conflict", "http"): "the base code of Conflict: no route raises it bare, every 409 "
    "names its cause (invalid_state, user_exists)",
    ("user_exists", "http"): "raised by `ridecast users create`, which no HTTP route calls",
    **{(code, "http"): "needs a server started with small RIDECAST_QUOTA_* settings "
       "(tests/cluster/test_quotas.py, tests/api/test_quotas.py)"
       for code in ("quota_runs", "quota_vehicles", "quota_vehicles_per_run",
                    "quota_simulations", "quota_templates", "quota_event_bytes")},
    ("too_many_streams", "http"): "a websocket refusal; see the ws row",
    ("too_many_streams", "ws"): "needs a stream open first: walked by "
    "test_too_many_streams_closes_the_one_stream_too_many below",
    ("store_refused", "http"): "needs the store to refuse a row: a trigger added to the "
    "database (tests/store/test_one_bad_row.py)",
    ("internal_error", "ws"): "needs the hub to fail unexpectedly mid-stream",
    ("service_unavailable", "http"): "needs the store to stop answering "
    "(tests/hub/test_store_failures.py, tests/test_faults.py)",
    ("service_unavailable", "ws"): "needs the store to stop answering "
    "(tests/hub/test_store_failures.py)",
    ("ingest_saturated", "http"): "needs writes pending beyond "
    "RIDECAST_INGEST_MAX_PENDING_EVENTS at once (tests/store/test_eventlog_limits.py)",
    ("simulator_owner_unreachable", "http"): "needs a second node that stops answering "
    "(tests/simulator/test_ownership.py)",
    ("simulator_operation_failed", "http"): "needs the engine to fail half way through an "
    "operation, which no request within the bounds makes it do (tests/simulator/test_atomic.py)",
    ("slow_consumer", "ws"): "needs a client that stops reading (tests/hub/test_flow.py)",
    ("server_going_away", "ws"): "needs the server to shut down (tests/hub/test_flow.py)",
}


def test_every_row_is_walked_or_says_why_not() -> None:
    """Each HTTP status and close code of the table has a recipe here or a reason."""
    rows = table()
    assert len(rows) >= 30, "docs/errors.md's table was not found"
    for row in rows.values():
        for kind, value, recipes in (("http", row.http_status, HTTP_RECIPES),
                                     ("ws", row.close_code, WS_RECIPES)):
            if value is None:
                assert row.code not in recipes, f"{row.code} has no {kind} column to walk"
                assert (row.code, kind) not in NOT_WALKED, (row.code, kind)
            else:
                assert (row.code in recipes) != ((row.code, kind) in NOT_WALKED), (
                    f"{row.code} ({kind} {value}) needs exactly one of a recipe or a reason")
    stale = (set(HTTP_RECIPES) | set(WS_RECIPES) | {code for code, _ in NOT_WALKED}) - set(rows)
    assert not stale, f"recipes for codes that are not in docs/errors.md: {stale}"


def _assert_error(response: httpx.Response, row: Row) -> None:
    assert response.status_code == row.http_status, (row.code, response.text)
    body = response.json()
    assert body["error"]["code"] == row.code, body
    assert body["error"]["message"], body


@pytest.mark.parametrize("code", sorted(HTTP_RECIPES))
def test_http_row(world: World, code: str) -> None:
    """The recipe's request answers the row's HTTP status with the row's code."""
    _assert_error(HTTP_RECIPES[code](world), table()[code])


@pytest.mark.parametrize("code", sorted(WS_RECIPES))
def test_websocket_row(world: World, code: str) -> None:
    """The recipe's stream is closed with the row's close code, its name as the reason."""
    row = table()[code]
    close_code, reason = asyncio.run(refusal(WS_RECIPES[code](world)))
    assert close_code == row.close_code, (code, close_code, reason)
    assert reason.startswith(code), reason


def test_too_many_streams_closes_the_one_stream_too_many(world: World) -> None:
    """One stream more than RIDECAST_WS_MAX_STREAMS_PER_TOKEN allows closes with its row."""
    row = table()["too_many_streams"]
    url = world.ws(f"?token={world.token()}")

    async def run() -> tuple[int | None, str]:
        first = await open_stream(url)
        try:
            return await refusal(url)
        finally:
            await first.close()

    close_code, reason = asyncio.run(run())
    assert close_code == row.close_code, (close_code, reason)
    assert reason.startswith("too_many_streams"), reason


def _query_cases(parameter: dict[str, Any]) -> list[str]:
    """Values of ``parameter`` that its schema refuses."""
    schema = parameter.get("schema", {})
    kinds = {option.get("type") for option in schema.get("anyOf", [schema])}
    items = schema.get("items", {})
    if parameter["name"] == "after":  # an event_id cursor, a string in the schema
        return ["abc", "-1"]
    if "integer" in kinds:
        cases = ["abc", "1.5", ""]
        if "minimum" in schema:
            cases.append(str(schema["minimum"] - 1))
        if "maximum" in schema:
            cases.append(str(schema["maximum"] + 1))
        return cases
    if "enum" in schema or "enum" in items:
        return ["no_such_value"]
    return []


def _expected_code(name: str) -> str:
    return {"after": "invalid_cursor", "message_type": "unknown_message_type"}.get(
        name, "invalid_query")


def test_a_wrong_query_parameter_is_its_row_on_every_operation(world: World) -> None:
    """limit=abc, limit=0, limit=100000, offset=-1, status=nope... on every operation."""
    rows = table()
    schema = world.http.get("/openapi.json").json()
    tried: set[str] = set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            params = operation.get("parameters", [])
            url = path
            for param in params:
                if param["in"] == "path":
                    url = url.replace("{" + param["name"] + "}", str(world.sim))
            for param in params:
                if param["in"] != "query":
                    continue
                for value in _query_cases(param):
                    response = world.http.request(method.upper(), url,
                                                  params={param["name"]: value})
                    row = rows[_expected_code(param["name"])]
                    _assert_error(response, row)
                    detail = json.dumps(response.json()["error"]["details"])
                    assert param["name"] in detail, (url, param["name"], detail)
                    tried.add(f"{method} {path} {param['name']}")
    # limit/offset of the three lists, status and message_type of the delivery log, ...
    assert len(tried) >= 7, tried
