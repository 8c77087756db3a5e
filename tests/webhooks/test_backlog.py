"""A simulation's webhook backlog and the age of its oldest undelivered event (issue 33,
item 8), against a real server: in the delivery log's meta and in /metrics while its
receiver fails, gone once it recovers."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx

from ridecast.cli.receiver import ReceiverThread, Reply, Request
from tests.conftest import Server

from .conftest import FAST_ENV
from .helpers import post_events, vehicle_use, wait_for


def _gauge(server: Server, name: str, sim: int) -> float | None:
    text = httpx.get(f"{server.base_url}/metrics").text
    found = re.search(rf'^{name}{{simulation_id="{sim}"}} (\S+)$', text, re.MULTILINE)
    return None if found is None else float(found.group(1))


def test_the_backlog_and_its_age_are_in_the_log_meta_and_in_metrics(
    start_server: Callable[..., Server],
) -> None:
    """Five events to a receiver answering 500: the meta and the gauges say 5 to send and
    an age above zero; when the receiver answers 204 the backlog drains to 0 and the
    simulation leaves the gauges."""
    server = start_server({**FAST_ENV, "RIDECAST_WEBHOOK_MAINTENANCE_INTERVAL_S": "0.2"})
    failing = True

    def answer(_request: Request) -> Reply:
        return Reply(500 if failing else 204)

    with ReceiverThread(answer) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {"messaging_webhook_url": receiver.url,
                                              "messaging_webhook_message_types": ["vehicle_use"]})
        with server.client(user) as http:
            post_events(http, sim, [vehicle_use(i) for i in range(5)])

            def meta() -> dict[str, object]:
                got = http.get(f"/api/v2/simulation/{sim}/webhook_deliveries")
                assert got.status_code == 200, got.text
                return dict(got.json()["meta"])

            first = meta()
            assert first["backlog"] == 5
            wait_for(lambda: _gauge(server, "ridecast_webhook_backlog", sim) == 5)
            wait_for(lambda: (_gauge(server, "ridecast_webhook_oldest_undelivered_age_seconds",
                                     sim) or 0) > 0)
            assert isinstance(first["oldest_undelivered_age_s"], float)
            failing = False
            wait_for(lambda: meta()["backlog"] == 0, timeout=60)
            assert meta()["oldest_undelivered_age_s"] is None
            wait_for(lambda: _gauge(server, "ridecast_webhook_backlog", sim) is None)
