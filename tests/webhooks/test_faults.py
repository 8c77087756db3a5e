"""Fault injection: receivers that reset, stall, answer huge bodies, redirect, speak broken
HTTP. Each attempt gets the right error class, is retried on the schedule, and another
endpoint's deliveries are not held up meanwhile."""

from __future__ import annotations

from datetime import datetime

import pytest

from ridecast.cli.receiver import ReceiverThread
from tests.conftest import Server

from . import faults
from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for

CASES = [
    (faults.reset, "connect"),
    (faults.stall, "timeout"),
    (faults.huge_500, "http_status"),
    (faults.redirect, "redirect"),
    (faults.broken, "protocol"),
]


@pytest.mark.parametrize(("fault", "error_class"), CASES, ids=[c[1] for c in CASES])
def test_fault_is_classified_retried_and_isolated(
    fast_server: Server, fault: faults.Fault, error_class: str
) -> None:
    """3 attempts of the faulty endpoint's delivery carry ``error_class``, spaced by the
    schedule (0.2 s); 50 events of a healthy endpoint arrive while it fails."""
    healthy = Recorder()
    with faults.FaultServer(fault) as bad, ReceiverThread(healthy) as good:
        user = fast_server.create_user()
        types = {"messaging_webhook_message_types": ["vehicle_use"]}
        bad_sim = fast_server.create_simulation(user, {"messaging_webhook_url": bad.url, **types})
        good_sim = fast_server.create_simulation(
            user, {"messaging_webhook_url": good.url, **types})
        with fast_server.client(user) as http:
            post_events(http, bad_sim, [vehicle_use(1)])
            wait_for(lambda: len(bad.requests) >= 1)
            ids = post_events(http, good_sim, [vehicle_use(i) for i in range(50)])
            wait_for(lambda: len(healthy.ids()) == 50)
            assert len(bad.requests) < 4  # the healthy endpoint did not wait for the faults
            wait_for(lambda: deliveries(http, bad_sim)[0]["attempt_count"] >= 3)
            attempts = deliveries(http, bad_sim)[0]["attempts"][:3]
    assert healthy.ids() == {f"msg_{i}" for i in ids}
    assert [a["error_class"] for a in attempts] == [error_class] * 3
    starts = [a["started_at"] for a in attempts]
    times = [datetime.fromisoformat(s).timestamp() for s in starts]
    assert times[1] - times[0] >= 0.19 and times[2] - times[1] >= 0.19
    if fault is faults.huge_500:
        # Only the start of the body is read and kept (RESPONSE_BODY_LIMIT).
        assert attempts[0]["status_code"] == 500
        assert len(attempts[0]["response_body"]) == 1024
