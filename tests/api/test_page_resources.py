"""Large history pages cost bounded memory (issue 32 item 3, the resource test).

A real server holds thirty ~0.9 MB events (27 MB); eight clients at once page through all
of it with limit=1000, twice. Each page stops at RIDECAST_MAX_PAGE_BYTES (4 MiB by
default), so the server's peak RSS (sampled from /proc while they read) stays within
PEAK_GROWTH_BOUND of where it started; before the budget, each such request built a
response of the whole history.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ridecast.events.examples import example_event
from tests.conftest import Server
from tests.hub.rawws import PeakRss

EVENTS = 30
CLIENTS = 8
PEAK_GROWTH_BOUND = 160 * 1024 * 1024  # SECURITY.md: 8 concurrent 4 MiB pages, copies included


def read_all_history(base_url: str, auth: tuple[str, str], sim: int) -> int:
    """Page through a simulation's whole history with ``limit=1000``; the number of events
    read."""
    seen, after = 0, "0"
    with httpx.Client(base_url=base_url, auth=auth, timeout=120) as http:
        while True:
            body = http.get(f"/api/v2/simulation/{sim}/events",
                            params={"after": after, "limit": 1000}).json()
            if not body["objects"]:
                return seen
            seen += len(body["objects"])
            after = body["meta"]["next_after"]


def test_concurrent_large_pages_keep_rss_bounded(start_server: Any) -> None:
    """Eight clients paging through 27 MB of events at once, twice: every event reached,
    and the peak RSS grows by less than PEAK_GROWTH_BOUND."""
    server: Server = start_server()
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        for marker in range(EVENTS):
            event = example_event("vehicle_use", sim)
            event["extra"] = {"marker": marker, "blob": ["x" * 60_000] * 15}
            stored = http.post(f"/api/v2/simulation/{sim}/events", json=event)
            assert stored.status_code == 201, stored.text
        first = http.get(f"/api/v2/simulation/{sim}/events", params={"limit": 1000}).json()
        assert first["meta"]["truncated"] and first["meta"]["count"] < EVENTS
    with PeakRss(server.process.pid) as rss:
        for _ in range(2):
            with ThreadPoolExecutor(CLIENTS) as pool:
                counts = list(pool.map(lambda _i: read_all_history(server.base_url, user.auth, sim),
                                       range(CLIENTS)))
            assert counts == [EVENTS] * CLIENTS
    growth = rss.growth
    assert growth < PEAK_GROWTH_BOUND, f"peak RSS grew by {growth / 2**20:.0f} MiB"
