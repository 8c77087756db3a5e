"""Webhook targets and secrets that cannot be sent (issue 32, item 2), against a real server:
refused when set, naming the field, with nothing stored; sent percent-encoded when they can
be; and, when such a value is in the store all the same, a failed attempt retried on the
schedule: no spin (the server's CPU time, read from /proc), ``webhook_test`` never a 500.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridecast.cli.receiver import ReceiverThread
from ridecast.webhooks.targets import InvalidTarget, TargetRefused, parse_target
from tests.conftest import Server

from .conftest import FAST_ENV
from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for

HOOK = {"messaging_webhook_message_types": ["vehicle_use"]}
BAD_SECRET = "whsec_!!!!not-base64!!!!"


def _refused(answer: httpx.Response, field: str) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_simulation_data"
    assert error["details"][0]["field"] == f"data.{field}"


@pytest.mark.parametrize(("key", "value"), [
    ("messaging_webhook_url", "http://[::1"),
    ("messaging_webhook_url", "http://[::1]x/"),
    ("messaging_webhook_url", "http://a..b/"),
    ("messaging_webhook_url", "http://exa mple/"),
    ("messaging_webhook_url", "http://[fe80::1%25eth0]/"),
    ("messaging_webhook_secret", BAD_SECRET),
    ("messaging_webhook_secret", "whsec_" + "=" * 12),
])
def test_a_value_the_sender_cannot_use_is_refused_on_every_write(
    server: Server, key: str, value: str
) -> None:
    """POST simulation, PATCH simulation, POST and PATCH template refuse it with 400
    invalid_simulation_data naming the field, and store nothing."""
    user = server.create_user()
    good = {"messaging_webhook_url": "http://127.0.0.1:9/", **HOOK}
    sim = server.create_simulation(user, good)
    data = {**good, key: value}
    with server.client(user) as http:
        _refused(http.post("/api/v2/simulation", json={"name": "s", "data": data}), key)
        _refused(http.patch(f"/api/v2/simulation/{sim}", json={"data": data}), key)
        _refused(http.post("/api/v2/simulation_template", json={"name": "t", "data": data}),
                 key)
        template = http.post("/api/v2/simulation_template",
                             json={"name": "t", "data": good}).json()["id"]
        _refused(http.patch(f"/api/v2/simulation_template/{template}", json={"data": data}),
                 key)
        assert http.get(f"/api/v2/simulation/{sim}").json()["data"] == good
        assert [s["id"] for s in http.get("/api/v2/simulation").json()["objects"]] == [sim]
        assert [t["data"] for t in http.get("/api/v2/simulation_template").json()[
            "objects"]] == [good]


def test_a_url_with_non_ascii_path_and_query_is_sent_percent_encoded(server: Server) -> None:
    """A path and query with characters outside ASCII (here the euro sign) are accepted
    and sent percent-encoded; the delivery succeeds."""
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        url = f"{receiver.url.rstrip('/')}/€/hooks?q=ä b"
        sim = server.create_simulation(user, {"messaging_webhook_url": url, **HOOK})
        with server.client(user) as http:
            post_events(http, sim, [vehicle_use(1)])
            wait_for(lambda: len(recorder.requests) == 1)
            wait_for(lambda: [d["status"] for d in deliveries(http, sim)] == ["succeeded"])
    assert recorder.requests[0].target == "/%E2%82%AC/hooks?q=%C3%A4%20b"


def _store(server: Server, sim: int, data: dict[str, Any]) -> None:
    """Write ``data`` straight into the store, as a row from before these checks would be."""
    path = server.database_url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE simulations SET data = ? WHERE id = ?", (json.dumps(data), sim))


def _cpu_s(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize(("key", "value"), [
    ("messaging_webhook_secret", BAD_SECRET),
    ("messaging_webhook_url", "http://[::1"),
])
def test_a_stored_value_that_cannot_be_sent_is_a_failed_attempt_not_a_spin(
    start_server: Callable[..., Server], key: str, value: str
) -> None:
    """The delivery's attempts are recorded with error class ``other`` and retried on the
    schedule (never left ``delivering``); the server spends a small share of a core
    meanwhile; ``webhook_test`` answers 200 with the failed attempt."""
    server = start_server(FAST_ENV)
    with ReceiverThread(Recorder()) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {"messaging_webhook_url": receiver.url, **HOOK,
                                              "messaging_webhook_secret": "whsec_" + "A" * 32})
        _store(server, sim, {"messaging_webhook_url": receiver.url, **HOOK, key: value})
        with server.client(user) as http:
            post_events(http, sim, [vehicle_use(1)])

            def attempts() -> list[dict[str, Any]]:
                found = deliveries(http, sim)
                return list(found[0]["attempts"]) if found else []

            wait_for(lambda: len(attempts()) >= 1)
            cpu, wall = _cpu_s(server.process.pid), time.monotonic()
            wait_for(lambda: len(attempts()) >= 3)  # two more retries, on the schedule
            used = (_cpu_s(server.process.pid) - cpu) / (time.monotonic() - wall)
            (delivery,) = deliveries(http, sim)
            tested = http.post(f"/api/v2/simulation/{sim}/webhook_test")
    assert {a["error_class"] for a in delivery["attempts"]} == {"other"}
    assert delivery["status"] in ("pending", "failed") and delivery["attempt_count"] >= 3
    starts = [a["started_at"] for a in delivery["attempts"]]
    assert starts == sorted(starts)
    assert used < 0.5, f"the server used {used:.0%} of a core while the delivery waited"
    assert tested.status_code == 200, tested.text
    assert tested.json()["ok"] is False and tested.json()["error_class"] == "other"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=20))
def test_any_accepted_target_can_be_written_as_a_request(path: str, host: str) -> None:
    """Whatever the path and host, ``parse_target`` either refuses the URL or gives a
    request target and Host header of printable ASCII with no space (what the sender
    writes on the request line)."""
    for url in (f"http://{host}/{path}", f"http://127.0.0.1:8080/{path}?{path}"):
        try:
            target = parse_target(url)
        except (InvalidTarget, TargetRefused):
            continue
        for text in (target.target, target.host_header):
            assert text.isascii() and text.isprintable() and " " not in text, url
