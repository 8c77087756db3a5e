"""The delivery log's pages stop at a byte budget (issue 32, item 3), against a real server:
a page of large deliveries holds as many as fit in ``RIDECAST_MAX_PAGE_BYTES``, says it was
cut (``meta.truncated``), and ``meta.next_after`` passed as ``after=`` reaches every one."""

from __future__ import annotations

from collections.abc import Callable

from ridecast.cli.receiver import ReceiverThread
from tests.conftest import Server

from .conftest import FAST_ENV
from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for

BUDGET = 20_000


def test_large_deliveries_page_within_the_budget_and_every_one_is_reached(
    start_server: Callable[..., Server],
) -> None:
    """Deliveries of ~8 KB each (a long URL): two to a 20 KB page with limit=1000; the
    pages, followed by next_after, list all 9 once, newest first; a bad cursor is a 400."""
    server = start_server({**FAST_ENV, "RIDECAST_MAX_PAGE_BYTES": str(BUDGET)})
    recorder = Recorder()
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        url = receiver.url.rstrip("/") + "/" + "p" * 8000
        sim = server.create_simulation(user, {"messaging_webhook_url": url,
                                              "messaging_webhook_message_types": ["vehicle_use"]})
        with server.client(user) as http:
            post_events(http, sim, [vehicle_use(i) for i in range(9)])
            wait_for(lambda: [d["status"] for d in deliveries(http, sim, limit=1)] == [
                "succeeded"] and len(recorder.requests) >= 9)
            seen: list[int] = []
            after: str | None = None
            pages = 0
            while True:
                params = {"limit": 1000, **({"after": after} if after else {})}
                answer = http.get(f"/api/v2/simulation/{sim}/webhook_deliveries",
                                  params=params)
                assert answer.status_code == 200, answer.text
                assert len(answer.content) <= BUDGET + 1024  # the budget, and its meta
                body = answer.json()
                pages += 1
                seen += [d["id"] for d in body["objects"]]
                if not body["meta"]["truncated"]:
                    break
                assert body["meta"]["count"] == len(body["objects"]) == 2
                after = body["meta"]["next_after"]
            bad = http.get(f"/api/v2/simulation/{sim}/webhook_deliveries",
                           params={"after": "x"})
    assert len(seen) == len(set(seen)) == 9 and seen == sorted(seen, reverse=True)
    assert pages == 5
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"
