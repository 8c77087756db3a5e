"""The store's parts of a delivery's latency in /metrics, against a real server: each group
commit of the event log and each webhook claim transaction is one observation of its
histogram (what ``bench/webhooks.py`` splits the steady phase's latency by)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ridecast.cli.receiver import ReceiverThread, Reply, Request
from tests.conftest import Server

from .conftest import FAST_ENV
from .helpers import post_events, vehicle_use, wait_for


def _histogram(server: Server, name: str) -> tuple[float, float]:
    """(count, sum) of ``name`` in the server's /metrics."""
    for family in text_string_to_metric_families(httpx.get(f"{server.base_url}/metrics").text):
        if family.name == name:
            samples = {sample.name: sample.value for sample in family.samples}
            return samples[f"{name}_count"], samples[f"{name}_sum"]
    raise AssertionError(f"{name} is not in /metrics")


def test_group_commits_and_claims_are_timed_in_metrics(
    start_server: Callable[..., Server],
) -> None:
    """Three ingest requests delivered to a receiver: at least three more group commits and
    at least one more claim transaction observed, each with time spent."""
    server = start_server(FAST_ENV)
    received: list[bytes] = []

    def answer(request: Request) -> Reply:
        received.append(request.body)
        return Reply(204)

    with ReceiverThread(answer) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {"messaging_webhook_url": receiver.url,
                                              "messaging_webhook_message_types": ["vehicle_use"]})
        commits = _histogram(server, "ridecast_eventlog_commit_seconds")
        claims = _histogram(server, "ridecast_webhook_claim_seconds")
        with server.client(user) as http:
            for n in range(3):
                post_events(http, sim, [vehicle_use(n)])
        wait_for(lambda: len(received) == 3)
        wait_for(lambda: _histogram(server, "ridecast_webhook_claim_seconds")[0] > claims[0])
    commits_after = _histogram(server, "ridecast_eventlog_commit_seconds")
    claims_after = _histogram(server, "ridecast_webhook_claim_seconds")
    # Each request is answered after its commit, and the next is sent after the answer:
    # three requests, three group commits at least.
    assert commits_after[0] >= commits[0] + 3
    assert commits_after[1] > commits[1]
    assert claims_after[1] > claims[1]
