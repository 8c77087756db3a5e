"""The webhook settings rules on PATCH, target refusal, the delivery log API and webhook_test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ridecast.cli.receiver import ReceiverThread
from tests.conftest import Server

from .helpers import Recorder, deliveries, offer_accepted, post_events, vehicle_use, wait_for


def test_patch_without_webhook_keys_stops_deliveries(server: Server) -> None:
    """A PATCH replacing data without the webhook keys stops deliveries (spec rule 1)."""
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        hook = {"messaging_webhook_url": receiver.url,
                "messaging_webhook_message_types": ["vehicle_use"]}
        sim = server.create_simulation(user, hook)
        with server.client(user) as http:
            first = post_events(http, sim, [vehicle_use(1)])
            # Sent before the PATCH: a delivery still queued then would be cancelled.
            wait_for(lambda: len(recorder.ids()) == 1)
            assert http.patch(f"/api/v2/simulation/{sim}", json={"data": {"k": 1}}).is_success
            silent = post_events(http, sim, [vehicle_use(2)])
            assert http.patch(f"/api/v2/simulation/{sim}", json={"data": hook}).is_success
            last = post_events(http, sim, [vehicle_use(3)])
            wait_for(lambda: len(recorder.ids()) == 2)
            logged = {d["event_id"] for d in deliveries(http, sim)}
    assert recorder.ids() == {f"msg_{first[0]}", f"msg_{last[0]}"}
    assert silent[0] not in logged


def test_read_merge_patch_with_if_match_keeps_other_keys(server: Server) -> None:
    """Read, merge a key, PATCH with If-Match: other keys and deliveries survive; stale is 412."""
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {"simulator": {"seed": 3}})
        with server.client(user) as http:
            got = http.get(f"/api/v2/simulation/{sim}")
            etag = got.headers["etag"]
            data = {**got.json()["data"], "messaging_webhook_url": receiver.url,
                    "messaging_webhook_message_types": ["offer_accepted"]}
            patched = http.patch(f"/api/v2/simulation/{sim}", json={"data": data},
                                 headers={"If-Match": etag})
            assert patched.status_code == 200
            assert patched.json()["data"]["simulator"] == {"seed": 3}
            stale = http.patch(f"/api/v2/simulation/{sim}", json={"data": {}},
                               headers={"If-Match": etag})
            assert stale.status_code == 412
            ids = post_events(http, sim, [offer_accepted(1)])
            wait_for(lambda: len(recorder.requests) == 1)
    assert recorder.ids() == {f"msg_{ids[0]}"}


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://169.254.10.1/",
    "http://[::ffff:169.254.169.254]/", "http://[fd00:ec2::254]/", "http://100.100.100.200/",
    "http://0.0.0.0:8080/", "http://224.0.0.1/", "http://[64:ff9b::a9fe:a9fe]/",
])
def test_refused_targets_are_400_at_patch_time(server: Server, url: str) -> None:
    """Metadata, link-local, reserved and embedded forms are refused with a clear 400."""
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        response = http.patch(f"/api/v2/simulation/{sim}", json={"data": {
            "messaging_webhook_url": url, "messaging_webhook_message_types": ["bookings"]}})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "webhook_target_refused"
    assert "refused" in error["message"]


def test_non_http_scheme_is_400(server: Server) -> None:
    """A non-http(s) URL is refused at PATCH time."""
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        response = http.patch(f"/api/v2/simulation/{sim}", json={"data": {
            "messaging_webhook_url": "file:///etc/passwd"}})
    assert response.status_code == 400


def test_private_refused_unless_allowed(start_server: Callable[..., Server]) -> None:
    """With RIDECAST_WEBHOOK_ALLOW_PRIVATE=false loopback and private targets are 400."""
    server = start_server({"RIDECAST_WEBHOOK_ALLOW_PRIVATE": "false"})
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        for url in ("http://127.0.0.1:9000/", "http://localhost:9000/", "http://10.0.0.5/",
                    "http://[::1]:9000/"):
            response = http.patch(f"/api/v2/simulation/{sim}", json={"data": {
                "messaging_webhook_url": url}})
            assert response.status_code == 400, url
            assert "ALLOW_PRIVATE" in response.json()["error"]["message"]


def test_webhook_test_sends_now_and_reports(server: Server) -> None:
    """webhook_test POSTs a webhook_test envelope at once and returns the attempt's outcome."""
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {"messaging_webhook_url": receiver.url})
        with server.client(user) as http:
            outcome = http.post(f"/api/v2/simulation/{sim}/webhook_test").json()
    assert outcome["ok"] is True and outcome["status_code"] == 204
    assert recorder.requests[0].json()["message_type"] == "webhook_test"  # type: ignore[index]


def test_delivery_log_filters_visibility_and_errors(server: Server) -> None:
    """The log filters by status and type, is hidden from other organisations, 404s bad ids."""
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {
            "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": ["vehicle_use", "offer_accepted"]})
        with server.client(user) as http:
            post_events(http, sim, [vehicle_use(1), offer_accepted(2), vehicle_use(3)])
            wait_for(lambda: len(deliveries(http, sim, status="succeeded")) == 3)
            assert len(deliveries(http, sim, message_type="vehicle_use")) == 2
            page = http.get(f"/api/v2/simulation/{sim}/webhook_deliveries/",
                            params={"limit": 1}).json()
            assert page["meta"]["total_count"] == 3 and len(page["objects"]) == 1
            assert http.get(f"/api/v2/simulation/{sim}/webhook_deliveries",
                            params={"status": "nope"}).status_code == 400
            assert http.post(
                f"/api/v2/simulation/{sim}/webhook_deliveries/999999/retry"
            ).json()["error"]["code"] == "delivery_not_found"
            one = deliveries(http, sim)[0]
            assert http.post(
                f"/api/v2/simulation/{sim}/webhook_deliveries/{one['id']}/retry"
            ).status_code == 200
            wait_for(lambda: len(recorder.requests) == 4)
        with server.client(server.create_user()) as other:
            assert other.get(f"/api/v2/simulation/{sim}/webhook_deliveries").status_code == 404
    assert recorder.requests[-1].headers["webhook-id"] == one["webhook_id"]
