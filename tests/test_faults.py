"""Fault injection on loopback: hostile websocket clients, floods, and SIGKILL mid-ingest.

After each fault the server is healthy, a well-behaved subscriber received every event in
order (the bound on others' delay: the whole burst within the test's 30 s wait), and the
event log holds every event that was acknowledged with 201.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.protocol import State

from tests.conftest import Server, launch_server
from tests.hub.wsutil import envelope, open_stream, post
from tests.waiting import eventually


def _raw(port: int, payload: bytes) -> None:
    """Send ``payload`` on a fresh TCP connection and read whatever comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(payload)
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass


def test_garbage_and_floods_leave_other_subscribers_whole(start_server: Any) -> None:
    """Garbage frames, broken handshakes and 300 idle connections harm no one else."""
    srv: Server = start_server()
    user = srv.create_user()
    sim = srv.create_simulation(user)
    token = srv.token(user)
    path = f"/simulation_events/{sim}?token={token}"
    for payload in (
        b"GET /simulation_events/ HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n",
        b"\x00\xff" * 4096,
        b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
        b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: bad\r\n\r\n",
    ):
        _raw(srv.port, payload)

    async def scenario() -> tuple[list[int], list[int], int]:
        healthy = await open_stream(f"{srv.ws_url}{path}")
        # One token opens at most RIDECAST_WS_MAX_STREAMS_PER_TOKEN (200) streams.
        tokens = [srv.token(user) for _ in range(3)]
        idle = await asyncio.gather(*(
            connect(f"{srv.ws_url}/simulation_events/{sim}?token={tokens[i % 3]}")
            for i in range(300)
        ))
        talkers = [await connect(f"{srv.ws_url}{path}") for _ in range(5)]
        for ws in talkers:  # clients that send what no stream expects
            await ws.send("{not json")
            await ws.send(b"\x00\x01binary")
        ids: list[int] = []
        async with httpx.AsyncClient(base_url=srv.base_url, auth=user.auth, timeout=30) as http:
            for batch in range(10):
                ids += await post(http, sim, [envelope(sim, "vehicle_use", batch * 10 + i)
                                              for i in range(10)])
        await healthy.wait_for(len(ids), timeout=30)
        # The idle ones never read (their client buffers fill): still served, not dropped.
        open_after = sum(ws.state is State.OPEN for ws in idle)
        for ws in [*idle, *talkers]:  # abort: a polite close would wait behind unread frames
            ws.transport.abort()
        await healthy.close()
        return ids, healthy.ids, open_after

    ids, received, open_after = asyncio.run(scenario())
    assert received == ids
    assert open_after >= 300  # the flood was served, not dropped
    with httpx.Client(base_url=srv.base_url) as http:
        assert http.get("/healthz").status_code == 200


def test_sigkill_during_ingest_loses_no_acknowledged_event(tmp_path: Path) -> None:
    """kill -9 while producers post: after restart, every 201's event_ids are in the log."""
    srv = launch_server(tmp_path)
    user = srv.create_user()
    sim = srv.create_simulation(user)
    acknowledged: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def produce(worker: int) -> None:
        with httpx.Client(base_url=srv.base_url, auth=user.auth, timeout=5) as http:
            n = 0
            while not stop.is_set() and n < 2000:
                n += 1
                try:
                    response = http.post(f"/api/v2/simulation/{sim}/events",
                                         json=[envelope(sim, "vehicle_use", worker * 10000 + n)])
                except httpx.HTTPError:
                    return
                if response.status_code == 201:
                    with lock:
                        acknowledged.extend(int(i) for i in response.json()["event_ids"])

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()

    def enough() -> bool:
        with lock:
            return len(acknowledged) >= 200

    eventually(enough, timeout=60, what="200 events acknowledged")
    srv.stop(signal.SIGKILL)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert len(acknowledged) >= 200

    restarted = launch_server(tmp_path, database_url=srv.database_url)
    try:
        stored: set[int] = set()
        after = 0
        with restarted.client(user) as http:
            while True:
                page = http.get(f"/api/v2/simulation/{sim}/events",
                                params={"after": after, "limit": 1000}).json()
                stored.update(int(e["event_id"]) for e in page["objects"])
                if not page["objects"]:
                    break
                after = int(page["meta"]["next_after"])
        assert set(acknowledged) <= stored
    finally:
        restarted.stop()
