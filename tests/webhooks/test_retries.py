"""Failing receivers: 500s, time-outs, 410, redirects, Retry-After; the attempt history."""

from __future__ import annotations

import time
from collections.abc import Callable

from ridecast.cli.receiver import ReceiverThread, Reply, Request
from tests.conftest import Server, server_per_backend

from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for


def _sim(server: Server, url: str) -> tuple[object, int]:
    user = server.create_user()
    sim = server.create_simulation(user, {
        "messaging_webhook_url": url, "messaging_webhook_message_types": ["vehicle_use"],
    })
    return user, sim


def test_500_then_timeout_then_recovery_delivers_all(fast_server: Server) -> None:
    """Each event gets a 500, then a time-out, then a 204: all arrive, attempts are logged."""
    seen: dict[str, int] = {}

    def behave(request: Request, _n: int) -> Reply:
        count = seen[request.headers["webhook-id"]] = seen.get(request.headers["webhook-id"], 0) + 1
        if count == 1:
            return Reply(500, b"boom")
        if count == 2:
            return Reply(204, delay_s=1.5)  # beyond RIDECAST_WEBHOOK_TIMEOUT_S=0.5
        return Reply(204)

    recorder = Recorder(behave)
    with ReceiverThread(recorder) as receiver:
        user, sim = _sim(fast_server, receiver.url)
        with fast_server.client(user) as http:  # type: ignore[arg-type]
            ids = post_events(http, sim, [vehicle_use(i) for i in range(5)])

            def all_done() -> bool:
                return {d["status"] for d in deliveries(http, sim)} == {"succeeded"}

            wait_for(all_done)
            log = deliveries(http, sim)
    assert {f"msg_{i}" for i in ids} <= recorder.ids()
    assert len(log) == 5
    for delivery in log:
        classes = [a["error_class"] for a in delivery["attempts"]]
        assert classes == ["http_status", "timeout", None], delivery
        assert delivery["attempts"][0]["status_code"] == 500
        assert delivery["attempts"][0]["response_body"] == "boom"
        assert delivery["attempt_count"] == 3


def test_redirect_is_a_failure_and_never_followed(fast_server: Server) -> None:
    """A 302 is recorded as a redirect failure; its Location is never requested."""
    recorder = Recorder(lambda req, n: Reply(302, headers={"location": "/elsewhere"})
                        if req.target == "/hook" else Reply(204))
    with ReceiverThread(recorder) as receiver:
        user, sim = _sim(fast_server, receiver.url + "/hook")
        with fast_server.client(user) as http:  # type: ignore[arg-type]
            post_events(http, sim, [vehicle_use(1)])
            wait_for(lambda: len(recorder.requests) >= 2)
            attempts = deliveries(http, sim)[0]["attempts"]
    assert all(r.target == "/hook" for r in recorder.requests)
    assert attempts[0]["error_class"] == "redirect" and attempts[0]["status_code"] == 302


def test_retry_after_is_honoured(fast_server: Server) -> None:
    """A 429 with Retry-After: 1 delays the next attempt by at least a second."""
    recorder = Recorder(lambda req, n: Reply(429, headers={"retry-after": "1"}) if n == 1
                        else Reply(204))
    with ReceiverThread(recorder) as receiver:
        user, sim = _sim(fast_server, receiver.url)
        with fast_server.client(user) as http:  # type: ignore[arg-type]
            post_events(http, sim, [vehicle_use(1)])
            wait_for(lambda: len(recorder.requests) == 2)
    first, second = recorder.requests
    assert second.received_at - first.received_at >= 0.95


def test_410_disables_endpoint_and_patch_reenables(fast_server: Server) -> None:
    """410 disables the endpoint at once (shown on the simulation); a PATCH re-enables it."""
    recorder = Recorder(lambda req, n: Reply(410))
    with ReceiverThread(recorder) as receiver:
        user, sim = _sim(fast_server, receiver.url)
        with fast_server.client(user) as http:  # type: ignore[arg-type]
            post_events(http, sim, [vehicle_use(1)])
            wait_for(lambda: http.get(f"/api/v2/simulation/{sim}").json()
                     ["messaging_webhook_disabled_at"] is not None)
            wait_for(lambda: deliveries(http, sim)[0]["status"] == "disabled")
            # Disabled: the next event is not even queued.
            post_events(http, sim, [vehicle_use(2)])
            assert len(deliveries(http, sim)) == 1
            current = http.get(f"/api/v2/simulation/{sim}").json()
            patched = http.patch(f"/api/v2/simulation/{sim}", json={"data": current["data"]})
            assert patched.json()["messaging_webhook_disabled_at"] is None
            recorder.behave = None
            assert http.post(
                f"/api/v2/simulation/{sim}/webhook_deliveries/retry_failed"
            ).json() == {"retried": 1}
            wait_for(lambda: deliveries(http, sim)[0]["status"] == "succeeded")
    assert len(recorder.requests) == 2


def test_schedule_exhausted_marks_failed_and_keeps(fast_server: Server) -> None:
    """After the last delay of the schedule the delivery is failed, kept, and replayable."""
    recorder = Recorder(lambda req, n: Reply(500))
    with ReceiverThread(recorder) as receiver:
        user, sim = _sim(fast_server, receiver.url)
        with fast_server.client(user) as http:  # type: ignore[arg-type]
            post_events(http, sim, [vehicle_use(1)])
            wait_for(lambda: deliveries(http, sim, status="failed") != [], timeout=30)
            failed = deliveries(http, sim, status="failed")[0]
            assert failed["attempt_count"] == 9  # the first try and 8 retries
            recorder.behave = None
            again = http.post(
                f"/api/v2/simulation/{sim}/webhook_deliveries/{failed['id']}/retry"
            )
            assert again.status_code == 200 and again.json()["status"] == "pending"
            wait_for(lambda: deliveries(http, sim)[0]["status"] == "succeeded")
    assert len(recorder.ids()) == 1
    _ = time


def test_endpoint_failing_continuously_is_disabled(start_server: Callable[..., Server]) -> None:
    """An endpoint failing for RIDECAST_WEBHOOK_DISABLE_AFTER_S is disabled, with a reason."""
    server = start_server({"RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[0.3, 0.3, 0.3, 0.3, 0.3, 0.3]",
                           "RIDECAST_WEBHOOK_DISABLE_AFTER_S": "0.5"})
    recorder = Recorder(lambda req, n: Reply(500))
    with ReceiverThread(recorder) as receiver:
        user, sim = _sim(server, receiver.url)
        with server.client(user) as http:  # type: ignore[arg-type]
            post_events(http, sim, [vehicle_use(1)])
            wait_for(lambda: http.get(f"/api/v2/simulation/{sim}").json()
                     ["messaging_webhook_disabled_at"] is not None)
            shown = http.get(f"/api/v2/simulation/{sim}").json()
            wait_for(lambda: deliveries(http, sim)[0]["status"] == "disabled")
    assert "failed continuously" in shown["messaging_webhook_disabled_reason"]


# A poll far longer than the test's wait: a retry that waited for the poll would not come.
on_time_server = server_per_backend("retry-on-time", scope="module", env={
    "RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[0.3]",
    "RIDECAST_WEBHOOK_RETRY_JITTER": "0",
    "RIDECAST_WEBHOOK_TIMEOUT_S": "0.5",
    "RIDECAST_WEBHOOK_LEASE_S": "2",
    "RIDECAST_WEBHOOK_POLL_INTERVAL_S": "300",
})


def test_a_retry_comes_due_on_time_not_at_the_next_poll(on_time_server: Server) -> None:
    """A 500, then the retry 0.3 s later: the dispatcher wakes when the retry it scheduled
    is due, not at its next poll (300 s away)."""
    recorder = Recorder(lambda req, n: Reply(500) if n == 1 else Reply(204))
    with ReceiverThread(recorder) as receiver:
        user, sim = _sim(on_time_server, receiver.url)
        with on_time_server.client(user) as http:  # type: ignore[arg-type]
            post_events(http, sim, [vehicle_use(1)])
            wait_for(lambda: len(recorder.requests) == 2, timeout=60)
            wait_for(lambda: deliveries(http, sim)[0]["status"] == "succeeded", timeout=60)
    first, second = recorder.requests
    assert second.headers["webhook-id"] == first.headers["webhook-id"]
    assert second.received_at - first.received_at >= 0.3 - 0.05  # not before it was due
