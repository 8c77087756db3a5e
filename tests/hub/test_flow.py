"""Resume, slow consumers and shutdown: no loss, no duplicate, never a silent gap."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx

from ..conftest import Server, free_port
from ..waiting import eventually_async
from .rawws import TEXT, parse_frames
from .wsutil import envelope, open_stream, post, refusal


def test_since_resumes_without_gap_or_duplicate_while_publishing(server: Server) -> None:
    """since= replays what was missed then goes live, with events arriving all along."""
    user = server.create_user()
    token = server.token(user)
    sim = server.create_simulation(user)
    other = server.create_simulation(user)

    async def run() -> None:
        ids: list[int] = []
        started = asyncio.Event()
        async with httpx.AsyncClient(base_url=server.base_url, auth=user.auth, timeout=30) as http:

            async def publish() -> None:
                for batch in range(60):
                    target = sim if batch % 3 else other
                    ids.extend(await post(http, target, [
                        envelope(target, "offer_accepted", batch * 100 + i) for i in range(20)
                    ]))
                    if batch == 30:
                        started.set()

            publisher = asyncio.create_task(publish())
            await started.wait()
            since = ids[100]
            one = await open_stream(
                f"{server.ws_url}/simulation_events/{sim}?token={token}&since={since}"
            )
            every = await open_stream(
                f"{server.ws_url}/simulation_events/offer_accepted?token={token}&since={since}"
            )
            await publisher
            # A marker both streams take: any frame they should not get comes before it.
            [marker] = await post(http, sim, [envelope(sim, "offer_accepted", 9999)])
        all_after = [i for i in ids if i > since]
        sim_ids = set(await _ids_of(server, user, sim))
        want_one = [i for i in all_after if i in sim_ids]
        await eventually_async(lambda: marker in one.ids and marker in every.ids,
                               what="the marker on both streams")
        assert one.ids == [*want_one, marker]
        assert every.ids == [*all_after, marker]
        await one.close()
        await every.close()

    asyncio.run(run())


async def _ids_of(server: Server, user: object, sim: int) -> list[int]:
    out: list[int] = []
    after = 0
    async with httpx.AsyncClient(base_url=server.base_url, auth=user.auth) as http:  # type: ignore[attr-defined]
        while True:
            response = await http.get(f"/api/v2/simulation/{sim}/events",
                                      params={"after": after, "limit": 1000})
            response.raise_for_status()
            body = response.json()
            page = [int(e["event_id"]) for e in body["objects"]]
            if not page:
                return out
            out += page
            after = page[-1]


def test_since_past_retention_is_refused(start_server: object) -> None:
    """A cursor older than the retained log closes with 4010 cursor_expired."""
    srv: Server = start_server({  # type: ignore[operator]
        "RIDECAST_EVENT_RETENTION_S": "1", "RIDECAST_RETENTION_INTERVAL_S": "0.3",
    })
    user = srv.create_user()
    token = srv.token(user)
    sim = srv.create_simulation(user)

    async def run() -> None:
        async with httpx.AsyncClient(base_url=srv.base_url, auth=user.auth) as http:
            first = await post(http, sim, [envelope(sim, "vehicle_use", i) for i in range(3)])

            async def purged() -> bool:
                return not set(first) & set(await _ids_of(srv, user, sim))

            await eventually_async(purged, timeout=30, step=0.1,
                                   what="retention removing the first events")
            [later] = await post(http, sim, [envelope(sim, "vehicle_use", 9)])
        url = f"{srv.ws_url}/simulation_events/{sim}?token={token}"
        code, reason = await refusal(f"{url}&since={first[0]}")
        assert code == 4010 and "cursor_expired" in reason
        ok = await open_stream(f"{url}&since={later - 1}")
        await ok.wait_for(1)
        assert ok.ids == [later]
        await ok.close()

    asyncio.run(run())


def _stalled_client(port: int, path: str) -> socket.socket:
    """A websocket handshake on a socket with a tiny receive buffer that is then never read."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _drain_frames(sock: socket.socket) -> tuple[list[bytes], int | None]:
    """Read until the server ends the connection: TEXT payloads and the close code."""
    sock.settimeout(15)
    data = bytearray()
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        data += chunk
        if _close_code(data)[1] is not None:
            break
    return _close_code(data)


def _close_code(data: bytearray) -> tuple[list[bytes], int | None]:
    """The text payloads at the start of ``data``, and the close code if one came."""
    frames, code = parse_frames(data)
    return [payload for opcode, payload in frames if opcode == TEXT], code


def test_stalled_client_is_closed_and_healthy_client_gets_everything(start_server: object) -> None:
    """A client that stops reading is closed with 4100 (on both ports) while a healthy client
    on the same channel receives every event in order; resuming loses nothing."""
    ws_port = free_port()
    srv: Server = start_server({  # type: ignore[operator]
        "RIDECAST_WS_SEND_QUEUE": "16", "RIDECAST_WS_PORT": str(ws_port),
    })
    user = srv.create_user()
    token = srv.token(user)
    sim = srv.create_simulation(user)
    path = f"/simulation_events/{sim}?token={token}"
    stalled = [_stalled_client(srv.port, path), _stalled_client(ws_port, path)]

    async def run() -> list[int]:
        healthy = await open_stream(f"{srv.ws_url}{path}")
        healthy_direct = await open_stream(f"ws://127.0.0.1:{ws_port}{path}")
        ids: list[int] = []
        async with httpx.AsyncClient(base_url=srv.base_url, auth=user.auth, timeout=30) as http:
            for batch in range(24):
                ids += await post(http, sim, [
                    envelope(sim, "bookings_cancellation", batch * 100 + i, pad=1200)
                    for i in range(50)
                ])
        await healthy.wait_for(len(ids), timeout=30)
        await healthy_direct.wait_for(len(ids), timeout=30)
        assert healthy.ids == ids
        assert healthy_direct.ids == ids
        await healthy.close()
        await healthy_direct.close()
        return ids

    ids = asyncio.run(run())
    for sock in stalled:
        texts, code = _drain_frames(sock)
        sock.close()
        assert code == 4100
        received = [int(t.rsplit(b'"event_id":"', 1)[1].rstrip(b'"}')) for t in texts]
        assert received == ids[: len(received)] and len(received) < len(ids)

        missed = ids[len(received):]
        resumed = asyncio.run(_resume(f"{srv.ws_url}{path}", received[-1] if received else 0,
                                   len(missed)))
        assert resumed == missed


async def _resume(url: str, last: int, count: int) -> list[int]:
    stream = await open_stream(f"{url}&since={last}")
    await stream.wait_for(count, timeout=30)
    await stream.close()
    return stream.ids


def test_shutdown_closes_streams_with_1001(start_server: object) -> None:
    """SIGTERM closes every stream with 1001 (going away), on both ports."""
    ws_port = free_port()
    srv: Server = start_server({"RIDECAST_WS_PORT": str(ws_port)})  # type: ignore[operator]
    user = srv.create_user()
    token = srv.token(user)

    async def run() -> None:
        a = await open_stream(f"{srv.ws_url}/simulation_events/?token={token}")
        b = await open_stream(f"ws://127.0.0.1:{ws_port}/simulation_events/?token={token}")
        started = time.monotonic()
        await asyncio.to_thread(srv.stop)
        assert await a.wait_closed() == 1001
        assert await b.wait_closed() == 1001
        assert time.monotonic() - started < 10

    asyncio.run(run())


def test_peer_that_never_answers_pings_is_reaped(start_server: object) -> None:
    """A client that never answers pings is disconnected after the ping interval and
    time-out, on both ports."""
    ws_port = free_port()
    srv: Server = start_server({  # type: ignore[operator]
        "RIDECAST_WS_PING_INTERVAL_S": "0.5", "RIDECAST_WS_PORT": str(ws_port),
    })
    user = srv.create_user()
    token = srv.token(user)
    path = f"/simulation_events/?token={token}"
    for port in (srv.port, ws_port):
        sock = _stalled_client(port, path)
        started = time.monotonic()
        sock.settimeout(15)
        saw_ping = False
        while True:  # read what arrives (pings), answer nothing, until the server hangs up
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            saw_ping = saw_ping or chunk[0] & 0x0F == 0x9
        sock.close()
        assert saw_ping
        assert time.monotonic() - started < 10
