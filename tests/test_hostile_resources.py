"""The resource test of issue 32: every kind of bounded hostile client at once against one
real ``ridecast serve``, with the server's memory and CPU time read from /proc.

At once: a stream that never reads while ~1 MB events flow into its simulation, a client
that floods pings and never reads, four clients paging the large history with
``limit=1000``, and a simulation whose webhook secret cannot be used (written straight
into the store, as a row from before the check at PATCH time would be) receiving events.

Asserted, as SECURITY.md states: the stream is closed 4100, the ping flood is stopped by
the server not reading, every pager reaches every event, the server's peak RSS grows by
less than PEAK_GROWTH_BOUND; and afterwards, with the flooding socket still open and the
bad delivery retried on its schedule, the server uses less than IDLE_CPU_BOUND of a core.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_page_resources import read_all_history
from tests.conftest import (
    STORES,
    Server,
    launch_store_server,
    stop_store_server,
    store_execute,
)
from tests.hub.rawws import PeakRss, flood_pings, handshake, read_frames
from tests.webhooks.conftest import FAST_ENV
from tests.webhooks.helpers import deliveries, vehicle_use, wait_for

MIB = 1024 * 1024
EVENTS = 32
"""Events of about 1 MB posted during the attack (the history holds these and a few more)."""
WARM = 6
"""Events posted before the attack: more than one page of RIDECAST_MAX_PAGE_BYTES."""
PAGERS = 4
PING_BYTES = 48 * MIB
"""Pings the flooding client tries to send."""
PEAK_GROWTH_BOUND = 128 * MIB
"""Most the server's peak RSS may grow during the attack (documented in SECURITY.md)."""
IDLE_CPU_BOUND = 0.25
"""Most of a core the server may use after the attack (documented in SECURITY.md)."""


def _big_event(sim: int, n: int) -> dict[str, Any]:
    # Strings stay under RIDECAST_MAX_JSON_STRING; the envelope keeps extra fields.
    pads = {f"pad{i}": chr(ord("a") + n % 26) * 60_000 for i in range(16)}
    return {**vehicle_use(n), "simulation_id": sim, "transmit_to_websocket": True, **pads}


def _cpu_s(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _flood_pings(port: int, path: str, sent: list[int], out: list[socket.socket]) -> None:
    """``flood_pings`` in a thread, its socket left open in ``out``."""
    out.append(flood_pings(port, path, sent, PING_BYTES))


def _store_bad_secret(server: Server, sim: int, url: str) -> None:
    """Write a secret the sender cannot use straight into the store."""
    data = {"messaging_webhook_url": url, "messaging_webhook_message_types": ["vehicle_use"],
            "messaging_webhook_secret": "whsec_!!!!not-base64!!!!"}
    quoted = json.dumps(data).replace("'", "''")
    store_execute(server, f"UPDATE simulations SET data = '{quoted}' WHERE id = {sim}")


@pytest.fixture(params=STORES)
def hostile_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """The attacked server, on SQLite and then on PostgreSQL (issue 50)."""
    srv = launch_store_server(request.param, tmp_path, {
        **FAST_ENV, "RIDECAST_WS_SEND_QUEUE_BYTES": str(2 * MIB),
        "RIDECAST_MAX_BODY_BYTES": str(2 * MIB)})
    yield srv
    stop_store_server(srv)


def test_all_hostile_clients_at_once_stay_within_the_memory_and_cpu_bounds(
    hostile_server: Server,
) -> None:
    server = hostile_server
    pid = server.process.pid
    user = server.create_user()
    sim = server.create_simulation(user)
    hooked = server.create_simulation(user, {"messaging_webhook_url": "http://127.0.0.1:9/"})
    _store_bad_secret(server, hooked, "http://127.0.0.1:9/")
    path = f"/simulation_events/{sim}?token={server.token(user)}"
    with server.client(user) as http:
        # Warm up: the allocator's arenas, SQLite's cache, a large page, the code paths.
        for n in range(WARM):
            http.post(f"/api/v2/simulation/{sim}/events", json=_big_event(sim, n)) \
                .raise_for_status()
        assert http.get(f"/api/v2/simulation/{sim}/events",
                        params={"limit": 1000}).json()["meta"]["truncated"]
    stalled = handshake(server.port, path, rcvbuf=4096)
    pinged: list[int] = [0]
    flooders: list[socket.socket] = []
    flood = threading.Thread(target=_flood_pings, args=(server.port, path, pinged, flooders),
                             daemon=True)
    try:
        with PeakRss(pid) as rss:
            flood.start()
            with server.client(user) as http, ThreadPoolExecutor(PAGERS) as pool:
                for n in range(3):
                    http.post(f"/api/v2/simulation/{hooked}/events",
                              json=vehicle_use(n) | {"simulation_id": hooked}
                              ).raise_for_status()
                pagers = [pool.submit(read_all_history, server.base_url, user.auth, sim)
                          for _ in range(PAGERS)]
                for n in range(WARM, WARM + EVENTS):
                    http.post(f"/api/v2/simulation/{sim}/events", json=_big_event(sim, n)) \
                        .raise_for_status()
                counts = [pager.result(timeout=300) for pager in pagers]
            flood.join(120)
            assert not flood.is_alive()
            _frames, code = read_frames(stalled, timeout=30)
    finally:
        stalled.close()
    try:
        assert code == 4100
        assert pinged[0] < PING_BYTES, "the server read every ping of a client that never reads"
        assert all(WARM <= count <= WARM + EVENTS for count in counts), counts
        growth = rss.growth
        assert growth < PEAK_GROWTH_BOUND, f"peak RSS grew by {growth / MIB:.0f} MiB"

        # After the attack: the flooder still connected, fresh bad deliveries retried on
        # their schedule (those of the attack may have used theirs up). Polled twice a
        # second, so the test's own requests cost the server little of the window.
        with server.client(user) as http:
            def attempts() -> int:
                return sum(d["attempt_count"] for d in deliveries(http, hooked))

            before = attempts()
            for n in range(3):
                http.post(f"/api/v2/simulation/{hooked}/events",
                          json=vehicle_use(n) | {"simulation_id": hooked}).raise_for_status()
            wait_for(lambda: attempts() >= before + 3, timeout=60, step=0.5)
            cpu, wall = _cpu_s(pid), time.monotonic()
            # Every retry of the schedule made, each a recorded failed attempt.
            wait_for(lambda: all(d["status"] == "failed" for d in deliveries(http, hooked)),
                     timeout=60, step=0.5)
            used = (_cpu_s(pid) - cpu) / (time.monotonic() - wall)
            found = deliveries(http, hooked)
        assert len(found) == 6
        schedule = len(json.loads(FAST_ENV["RIDECAST_WEBHOOK_RETRY_SCHEDULE_S"]))
        assert [d["attempt_count"] for d in found] == [schedule + 1] * 6
        assert {a["error_class"] for d in found for a in d["attempts"]} == {"other"}
        assert used < IDLE_CPU_BOUND, f"the server used {used:.0%} of a core after the attack"
    finally:
        for sock in flooders:
            sock.close()
    print(f"rss MiB: baseline {rss.baseline / MIB:.0f}, peak {rss.peak / MIB:.0f} "
          f"(+{growth / MIB:.0f}); pings taken {pinged[0] / MIB:.1f} MiB; events read per "
          f"pager {counts}; CPU after the attack {used:.1%} of a core")
