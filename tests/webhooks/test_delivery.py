"""Deliveries against a real receiver on loopback: filter, envelope, headers, signature."""

from __future__ import annotations

import json

from standardwebhooks import Webhook

from ridecast import __version__
from ridecast.cli.receiver import ReceiverThread
from tests.conftest import Server

from .helpers import Recorder, deliveries, offer_accepted, post_events, vehicle_use, wait_for

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def test_only_filtered_types_arrive_signed_with_exact_envelope(server: Server) -> None:
    """Only filtered types are POSTed: the stored envelope, our headers, a valid signature."""
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {
            "messaging_webhook_url": receiver.url + "/hook?x=1",
            "messaging_webhook_message_types": ["offer_accepted"],
            "messaging_webhook_secret": SECRET,
        })
        with server.client(user) as http:
            ids = post_events(http, sim, [vehicle_use(1), offer_accepted(5), vehicle_use(2),
                                          offer_accepted(6)])
            wait_for(lambda: len(recorder.requests) >= 2)
            history = http.get(f"/api/v2/simulation/{sim}/events").json()["objects"]
            # The receiver has both requests before their results are recorded.
            wait_for(lambda: {d["status"] for d in deliveries(http, sim)} == {"succeeded"})
            log = deliveries(http, sim)
    assert len(recorder.requests) == 2
    stored = {e["event_id"]: e for e in history}
    verifier = Webhook(SECRET)
    by_id = {r.headers["webhook-id"]: r for r in recorder.requests}
    assert set(by_id) == {f"msg_{ids[1]}", f"msg_{ids[3]}"}
    for event_id in (ids[1], ids[3]):
        request = by_id[f"msg_{event_id}"]
        assert request.method == "POST"
        assert request.target == "/hook?x=1"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["user-agent"] == f"ridecast/{__version__}"
        assert request.headers["webhook-id"] == f"msg_{event_id}"
        expected = dict(stored[event_id])
        del expected["event_id"]
        assert json.loads(request.body) == expected
        assert verifier.verify(request.body, request.headers) == expected
    assert {d["status"] for d in log} == {"succeeded"}
    assert all(len(d["attempts"]) == 1 and d["attempts"][0]["status_code"] == 204 for d in log)


def test_no_signature_without_secret(server: Server) -> None:
    """Without messaging_webhook_secret the delivery carries no webhook-signature header."""
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {
            "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": ["vehicle_use"],
        })
        with server.client(user) as http:
            post_events(http, sim, [vehicle_use(1)])
            wait_for(lambda: len(recorder.requests) == 1)
    headers = recorder.requests[0].headers
    assert "webhook-signature" not in headers
    assert int(headers["webhook-timestamp"]) > 0
