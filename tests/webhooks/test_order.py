"""Order as a promise: one simulation's events reach its endpoint in event_id order."""

from __future__ import annotations

import itertools

import httpx

from ridecast.cli.receiver import ReceiverThread, Reply, Request
from tests.conftest import Server

from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for


def _arrivals(recorder: Recorder) -> dict[int, list[int]]:
    """event ids per simulation, in the order the receiver got them."""
    out: dict[int, list[int]] = {}
    for request in list(recorder.requests):
        sim = int(request.json()["simulation_id"])  # type: ignore[index]
        out.setdefault(sim, []).append(int(request.headers["webhook-id"].removeprefix("msg_")))
    return out


def _inversions(seq: list[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(seq) if b < a)


def _post_many(http: httpx.Client, sim: int, count: int) -> list[int]:
    ids: list[int] = []
    for start in range(0, count, 50):
        ids += map(int, post_events(http, sim, [vehicle_use(i) for i in range(start,
                                                                            start + 50)]))
    return ids


def test_ordered_by_default_across_several_simulations(fast_server: Server) -> None:
    """3 simulations x 300 events to one receiver: each simulation's arrive with 0 inversions."""
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = fast_server.create_user()
        hook = {"messaging_webhook_url": receiver.url,
                "messaging_webhook_message_types": ["vehicle_use"]}
        sims = [fast_server.create_simulation(user, hook) for _ in range(3)]
        with fast_server.client(user) as http:
            sent = {sim: _post_many(http, sim, 300) for sim in sims}
            wait_for(lambda: len(recorder.ids()) == 900, timeout=60)
    got = _arrivals(recorder)
    for sim in sims:
        assert got[sim] == sent[sim], f"simulation {sim}: {_inversions(got[sim])} inversions"


def test_a_retry_holds_later_events_behind_it(fast_server: Server) -> None:
    """Head-of-line: the 5th event fails twice; nothing after it arrives before its success."""
    fifth: list[str] = []

    def behave(request: Request, _n: int) -> Reply:
        if not fifth and request.json()["data"]["vehicle_id"] == 4:  # type: ignore[index]
            fifth.append(request.headers["webhook-id"])
        if fifth and request.headers["webhook-id"] == fifth[0]:
            tries = sum(1 for r in recorder.requests if r.headers["webhook-id"] == fifth[0])
            if tries <= 2:
                return Reply(500, b"not yet")
        return Reply(204)

    recorder = Recorder(behave)
    with ReceiverThread(recorder) as receiver:
        user = fast_server.create_user()
        sim = fast_server.create_simulation(user, {
            "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": ["vehicle_use"]})
        with fast_server.client(user) as http:
            ids = list(map(int, post_events(http, sim, [vehicle_use(i) for i in range(20)])))
            wait_for(lambda: len(recorder.requests) == 22)
            # The receiver has answered; the log records the last success just after.
            wait_for(lambda: len(deliveries(http, sim, status="succeeded")) == 20)
            log = {int(d["event_id"]): d for d in deliveries(http, sim)}
    arrived = _arrivals(recorder)[sim]
    assert arrived == [*ids[:5], ids[4], ids[4], *ids[5:]]
    assert [a["status_code"] for a in log[ids[4]]["attempts"]] == [500, 500, 204]


def test_unordered_opt_in_delivers_every_event(fast_server: Server) -> None:
    """messaging_webhook_ordering: "unordered" still delivers every event (order not promised)."""
    recorder = Recorder(lambda req, n: Reply(204, delay_s=0.002))
    with ReceiverThread(recorder) as receiver:
        user = fast_server.create_user()
        sim = fast_server.create_simulation(user, {
            "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": ["vehicle_use"],
            "messaging_webhook_ordering": "unordered"})
        with fast_server.client(user) as http:
            ids = _post_many(http, sim, 400)
            wait_for(lambda: len(recorder.ids()) == 400, timeout=60)
            wait_for(lambda: len(deliveries(http, sim, status="succeeded")) == 400)
    assert sorted(_arrivals(recorder)[sim]) == sorted(ids)


def test_ordering_setting_is_validated(server: Server) -> None:
    """An unknown messaging_webhook_ordering value is a 400 naming the field and the values."""
    user = server.create_user()
    with server.client(user) as http:
        response = http.post("/api/v2/simulation", json={"name": "x", "data": {
            "messaging_webhook_ordering": "sideways"}})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_simulation_data"
    assert error["details"][0]["field"] == "data.messaging_webhook_ordering"
    assert error["details"][0]["valid"] == ["ordered", "unordered"]
