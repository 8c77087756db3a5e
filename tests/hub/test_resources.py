"""Hostile stream clients against a real server, with its memory read from /proc: a stream
that never reads while large events flow, and a client that floods pings and never reads.

The bound asserted is the one SECURITY.md states: a stream holds at most
RIDECAST_WS_SEND_QUEUE_BYTES plus one bus batch, and a connection whose writes are paused
is not read, so the server's resident memory grows by a few budgets at most, not by what
the attackers send; and what a closed stream held is released, so a second attack costs
no more than the first.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import httpx

from tests.conftest import Server
from tests.hub.rawws import flood_pings, handshake, read_frames, rss_bytes

MIB = 1024 * 1024
BUDGET = 2 * MIB
EVENTS = 48
"""Events of about 1 MB fed per round: 48 MB that a frame-only bound (1,024) would keep."""
PING_BYTES = 48 * MIB
"""Pings the flooding client tries to send per round."""
GROWTH_BOUND = 32 * MIB
"""Most the server's RSS may grow over a round (documented in SECURITY.md)."""


def _big_event(sim: int, n: int) -> dict[str, Any]:
    # Strings stay under RIDECAST_MAX_JSON_STRING; the envelope keeps extra fields.
    pads = {f"pad{i}": chr(ord("a") + n % 26) * 60_000 for i in range(16)}
    return {
        "simulation_id": sim, "agent_type": "vehicle", "message_type": "vehicle_use",
        "data": {"vehicle_id": n, "action": "disabled"},
        "current_sim_ts": "2024-05-01T10:00:00+00:00", "transmit_to_websocket": True,
        **pads,
    }


def _round(srv: Server, user_auth: tuple[str, str], sim: int, path: str) -> tuple[int, int, int]:
    """One attack: a never-reading stream fed EVENTS large events and a ping flood at once.
    The close code of the stream, the ping bytes the server took, and the RSS after."""
    stalled = handshake(srv.port, path, rcvbuf=4096)
    sent = [0]
    holder: list[socket.socket] = []
    flood = threading.Thread(
        target=lambda: holder.append(flood_pings(srv.port, path, sent, PING_BYTES)), daemon=True)
    flood.start()
    with httpx.Client(base_url=srv.base_url, auth=user_auth, timeout=60) as http:
        for n in range(EVENTS):
            http.post(f"/api/v2/simulation/{sim}/events", json=_big_event(sim, n)) \
                .raise_for_status()
    flood.join(120)
    assert not flood.is_alive()
    rss = rss_bytes(srv.process.pid)
    _frames, code = read_frames(stalled, timeout=30)
    stalled.close()
    for sock in holder:
        sock.close()
    return code or 0, sent[0], rss


def test_never_reading_stream_and_ping_flood_stay_within_the_memory_bound(
    start_server: Any,
) -> None:
    """The stalled stream is closed 4100 once its byte budget is reached, the ping flood is
    stopped by the server not reading, RSS grows by less than GROWTH_BOUND, and a second
    round costs no more memory than the first (what a closed stream held was released)."""
    srv: Server = start_server({"RIDECAST_WS_SEND_QUEUE_BYTES": str(BUDGET),
                                "RIDECAST_MAX_BODY_BYTES": str(2 * MIB)})
    user = srv.create_user()
    sim = srv.create_simulation(user)
    path = f"/simulation_events/{sim}?token={srv.token(user)}"
    with httpx.Client(base_url=srv.base_url, auth=user.auth, timeout=60) as http:
        # Warm up: the allocator's arenas, SQLite's cache and the code paths.
        for n in range(4):
            http.post(f"/api/v2/simulation/{sim}/events", json=_big_event(sim, n)) \
                .raise_for_status()
    before = rss_bytes(srv.process.pid)
    code, pinged, after_first = _round(srv, user.auth, sim, path)
    assert code == 4100
    assert pinged < PING_BYTES, "the server read every ping of a client that never reads"
    assert after_first - before < GROWTH_BOUND, (before, after_first)
    code, pinged, after_second = _round(srv, user.auth, sim, path)
    assert code == 4100
    assert pinged < PING_BYTES
    assert after_second - before < GROWTH_BOUND, (before, after_first, after_second)
    print(f"rss MiB: before {before / MIB:.0f}, after round 1 {after_first / MIB:.0f}, "
          f"after round 2 {after_second / MIB:.0f}; pings taken {pinged / MIB:.1f} MiB")
