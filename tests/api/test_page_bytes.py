"""A history page stops at RIDECAST_MAX_PAGE_BYTES (issue 32 item 3), against a real server.

Paging with ``after=meta.next_after`` still reaches every event, in order; an event larger
than the budget comes alone on its page; the SDK's ``history()`` follows ``meta.truncated``.
"""

from __future__ import annotations

from typing import Any

from ridecast.client import Client
from ridecast.events.examples import example_event
from tests.conftest import Server

BUDGET = 600_000


def _event(sim: int, marker: int, strings: int) -> dict[str, Any]:
    event = example_event("vehicle_use", sim)
    # Strings stay under RIDECAST_MAX_JSON_STRING: a ~0.9 MB event is many of them.
    event["extra"] = {"marker": marker, "blob": ["x" * 60_000] * strings}
    return event


def test_pages_stop_at_the_byte_budget_and_reach_every_event(start_server: Any) -> None:
    """Small and ~0.9 MB events, paged with after=: every event once, in order; a page
    stays within the budget unless it holds one event alone."""
    server: Server = start_server({"RIDECAST_MAX_PAGE_BYTES": str(BUDGET)})
    user = server.create_user()
    sim = server.create_simulation(user)
    plan = [0, 0, 0, 15, 0, 0, 15, 15, 0]  # 60 kB strings per event: 0 is small, 15 ~0.9 MB
    with server.client(user) as http:
        for marker, strings in enumerate(plan):
            stored = http.post(f"/api/v2/simulation/{sim}/events",
                               json=_event(sim, marker, strings))
            assert stored.status_code == 201, stored.text
        seen: list[int] = []
        pages: list[tuple[int, bool]] = []
        after = "0"
        while True:
            page = http.get(f"/api/v2/simulation/{sim}/events",
                            params={"after": after, "limit": 1000})
            assert page.status_code == 200, page.text
            body = page.json()
            objects, meta = body["objects"], body["meta"]
            if not objects:
                assert meta["truncated"] is False and meta["next_after"] is None
                break
            assert len(page.content) <= BUDGET + 200 or len(objects) == 1, len(page.content)
            assert meta["next_after"] == objects[-1]["event_id"]
            seen.extend(obj["extra"]["marker"] for obj in objects)
            pages.append((len(objects), meta["truncated"]))
            after = meta["next_after"]
        assert seen == list(range(len(plan)))
        # Cut before each large event, and each large event alone on its page.
        assert pages == [(3, True), (1, True), (2, True), (1, True), (1, True), (1, False)]
        # A limit smaller than what fits ends the page first, untruncated.
        page = http.get(f"/api/v2/simulation/{sim}/events", params={"limit": 2}).json()
        assert page["meta"]["count"] == 2 and page["meta"]["truncated"] is False
    with Client(server.base_url, user=user.name, key=user.key) as client:
        history = list(client.history(sim, page_size=100))
    assert len(history) == len(plan)  # it went on past pages the budget cut short
