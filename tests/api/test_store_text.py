"""Both stores accept and refuse the same text (issue 50): a NUL anywhere in a body is refused
at the edge with 400 ``unsupported_character``, whatever field holds it, and a receiver's
answer holding one is kept with U+FFFD in its place, never failing the record of anyone's
deliveries. Run on SQLite (which would keep a NUL) and on PostgreSQL (which refuses one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ridecast.cli.receiver import ReceiverThread, Reply
from ridecast.events.examples import all_examples
from tests.conftest import Server, server_per_store
from tests.webhooks.conftest import FAST_ENV
from tests.webhooks.helpers import Recorder, deliveries, post_events, vehicle_use, wait_for

server = server_per_store("text", env=FAST_ENV)

NUL = "a\x00b"


@pytest.fixture(scope="module")
def world(server: Server) -> Iterator[dict[str, Any]]:
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        template = http.post("/api/v2/simulation_template", json={"name": "t"}).json()["id"]
        yield {"server": server, "sim": sim, "template": template, "http": http}


def _bodies(sim: int, template: int) -> list[tuple[str, str, Any]]:
    event = all_examples(sim)[0]
    nested = {**event, "data": {**event["data"], "deep": [{"x": NUL}]}}
    keyed = {**event, "data": {**event["data"], NUL: 1}}
    hook = {"messaging_webhook_message_types": ["vehicle_use"]}
    return [
        ("POST", "/api/v2/simulation", {"name": NUL}),
        ("POST", "/api/v2/simulation", {"name": "n", "data": {"k": [NUL]}}),
        ("POST", "/api/v2/simulation_template", {"name": NUL}),
        ("PATCH", f"/api/v2/simulation/{sim}", {"name": NUL}),
        ("PATCH", f"/api/v2/simulation_template/{template}", {"name": NUL}),
        ("PATCH", f"/api/v2/simulation/{sim}",
         {"data": {**hook, "messaging_webhook_url": "http://127.0.0.1:9/a\x00b"}}),
        ("PATCH", f"/api/v2/simulation/{sim}",
         {"data": {**hook, "messaging_webhook_url": "http://127.0.0.1:9/",
                   "messaging_webhook_secret": "whsec_\x00"}}),
        ("POST", f"/api/v2/simulation/{sim}/events", nested),
        ("POST", f"/api/v2/simulation/{sim}/events", [keyed]),
        ("POST", f"/api/v2/simulation/{sim}/bookings", {"pickup_lat": 1, "note": NUL}),
    ]


@pytest.mark.parametrize("case", range(10))
def test_a_nul_anywhere_in_a_body_is_400_on_both_stores(world: dict[str, Any],
                                                          case: int) -> None:
    """Names, URLs, secrets, nested data and event fields: 400 unsupported_character,
    naming the field, and nothing stored (the listings answer as before)."""
    http: httpx.Client = world["http"]
    method, url, body = _bodies(world["sim"], world["template"])[case]
    before = len(http.get("/api/v2/simulation?limit=1000").json()["objects"])
    response = http.request(method, url, content=json.dumps(body).encode(),
                            headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "unsupported_character", error
    assert error["details"][0]["field"].startswith("body"), error
    assert len(http.get("/api/v2/simulation?limit=1000").json()["objects"]) == before
    assert http.get(f"/api/v2/simulation/{world['sim']}").json()["name"] != NUL
    events = http.get(f"/api/v2/simulation/{world['sim']}/events?limit=1000")
    assert events.status_code == 200 and events.json()["objects"] == []


def test_other_control_characters_are_stored_on_both_stores(world: dict[str, Any]) -> None:
    """Every other control character and an astral one is kept as sent."""
    http: httpx.Client = world["http"]
    name = "".join(chr(c) for c in range(1, 32)) + "\x7f\U0001f600"
    created = http.post("/api/v2/simulation", json={"name": name, "data": {"k": name}})
    assert created.status_code == 201, created.text
    got = http.get(f"/api/v2/simulation/{created.json()['id']}").json()
    assert (got["name"], got["data"]["k"]) == (name, name)


def test_a_receivers_nul_is_kept_as_u_fffd_and_fails_no_one(server: Server) -> None:
    """A receiver answering a NUL (and bytes that are not UTF-8): its delivery is recorded
    succeeded with U+FFFD in their place, and another organisation's deliveries, sent at
    the same time, are all recorded too."""
    hostile = Recorder(lambda _request, _n: Reply(200, b"ok\x00\xff\xfe" * 20))
    fair = Recorder()
    attacker, other = server.create_user(), server.create_user()
    with ReceiverThread(hostile) as bad, ReceiverThread(fair) as good:
        sims = [server.create_simulation(
            owner, {"messaging_webhook_url": receiver.url,
                    "messaging_webhook_message_types": ["vehicle_use"]})
            for owner, receiver in ((attacker, bad), (other, good))]
        with server.client(attacker) as a, server.client(other) as b:
            for n in range(10):
                post_events(a, sims[0], [vehicle_use(n)])
                post_events(b, sims[1], [vehicle_use(n)])

            def recorded(http: httpx.Client, sim: int) -> bool:
                return sum(d["status"] == "succeeded" for d in deliveries(http, sim)) == 10

            wait_for(lambda: recorded(a, sims[0]) and recorded(b, sims[1]), timeout=60,
                     why=lambda: server.logs()[-2000:])
            bodies = {attempt["response_body"] for d in deliveries(a, sims[0])
                      for attempt in d["attempts"]}
    assert len(hostile.requests) == len(fair.requests) == 10
    assert "recording or claiming webhook deliveries failed" not in server.logs()
    assert any(body and "ok\ufffd" in body for body in bodies), bodies
