"""client.stream against a real server: filtering, since= replay, refusals, restarts."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import pytest

from ridecast.client import AsyncClient, Backoff, Client, StreamNotFound, StreamStatus
from ridecast.events.examples import example_event
from tests.conftest import Server

FAST = Backoff(initial=0.05, maximum=0.5)


async def make_client(server: Server) -> AsyncClient:
    user = await asyncio.to_thread(server.create_user)
    return AsyncClient(server.base_url, user=user.name, key=user.key)


def on_connect(flag: asyncio.Event) -> Callable[[StreamStatus], None]:
    def seen(status: StreamStatus) -> None:
        if status.kind == "connected":
            flag.set()
    return seen


async def test_stream_yields_typed_events_of_the_wanted_types(server: Server) -> None:
    """Several types share one connection: only they arrive, in event_id order, typed."""
    async with await make_client(server) as client:
        sim = await client.create_simulation("stream")
        connected = asyncio.Event()
        stream = client.stream(sim.id, types=["gps_data", "assignment"],
                               on_status=on_connect(connected))
        got: list[tuple[str, str | None]] = []

        async def consume() -> None:
            async with stream:
                async for event in stream:
                    got.append((event.message_type, event.event_id))
                    if len(got) == 4:
                        return

        task = asyncio.create_task(consume())
        await asyncio.wait_for(connected.wait(), 10)
        types = ["bookings", "gps_data", "assignment", "offers", "gps_data", "assignment"]
        ids = await client.post_events(sim.id, [example_event(t, sim.id) for t in types])
        await asyncio.wait_for(task, 10)
    assert got == [(t, i) for t, i in zip(types, ids, strict=True)
                   if t in ("gps_data", "assignment")]


async def test_since_replays_what_was_missed(server: Server) -> None:
    """since=<event_id> first replays the stored events after it, then goes live."""
    async with await make_client(server) as client:
        sim = await client.create_simulation("replay")
        ids = await client.post_events(sim.id, [example_event("vehicle_use", sim.id)] * 5)
        stream = client.stream(sim.id, types=["vehicle_use"], since=ids[1])
        received: list[str | None] = []
        async with stream:
            async for event in stream:
                received.append(event.event_id)
                if len(received) == 3:
                    break
        assert received == ids[2:]
        assert stream.last_event_id == ids[-1]


async def test_invisible_simulation_stops_with_a_typed_error(server: Server) -> None:
    """Another organisation's simulation is refused (4006) without reconnect attempts."""
    async with await make_client(server) as owner, await make_client(server) as stranger:
        sim = await owner.create_simulation("private")
        statuses: list[StreamStatus] = []
        with pytest.raises(StreamNotFound) as refused:
            async for _event in stranger.stream(sim.id, on_status=statuses.append):
                pass
        assert refused.value.code == "simulation_not_found"
        assert not [s for s in statuses if s.kind == "waiting"]


async def test_resumes_across_a_server_restart(start_server: Callable[..., Server]) -> None:
    """The server stops (1001) and comes back: the stream reconnects and misses nothing."""
    first = await asyncio.to_thread(start_server)
    client = await make_client(first)
    sim = await client.create_simulation("restart")
    statuses: list[StreamStatus] = []
    connected = asyncio.Event()

    def seen(status: StreamStatus) -> None:
        statuses.append(status)
        on_connect(connected)(status)

    stream = client.stream(sim.id, backoff=FAST, on_status=seen)
    received: list[str | None] = []
    three, enough = asyncio.Event(), asyncio.Event()

    async def consume() -> None:
        async with stream:
            async for event in stream:
                received.append(event.event_id)
                if len(received) == 3:
                    three.set()
                if len(received) == 6:
                    enough.set()
                    return

    task = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(connected.wait(), 10)
        before = await client.post_events(sim.id, [example_event("gps_data", sim.id)] * 3)
        await asyncio.wait_for(three.wait(), 10)
        await asyncio.to_thread(first.stop, signal.SIGTERM)
        second = await asyncio.to_thread(start_server, database_url=first.database_url,
                                         port=first.port)
        after = await client.post_events(sim.id, [example_event("gps_data", sim.id)] * 3)
        await asyncio.wait_for(enough.wait(), 20)
        await task
    finally:
        task.cancel()
        await client.aclose()
    assert received == before + after
    closes = [s.close_code for s in statuses if s.kind == "closed"]
    assert closes and closes[0] in (1001, 1012, 1006, None)
    assert sum(s.kind == "connected" for s in statuses) >= 2
    assert second.port == first.port


def test_sync_client_streams_too(server: Server) -> None:
    """Client.stream is a blocking iterator over the same resumable stream."""
    user = server.create_user()
    with Client(server.base_url, user=user.name, key=user.key) as client:
        sim = client.create_simulation("sync")
        ids = client.post_events(sim.id, [example_event("offers", sim.id)] * 3)
        events = client.stream(sim.id, since=ids[0])
        got = [next(events).event_id, next(events).event_id]
        events.close()  # type: ignore[attr-defined]
    assert got == ids[1:]


async def test_expired_token_is_renewed_mid_stream(start_server: Callable[..., Server]) -> None:
    """When the token expires on an open stream (4004), a fresh one resumes it without loss."""
    srv = await asyncio.to_thread(start_server, {"RIDECAST_TOKEN_TTL_S": "2"})
    client = await make_client(srv)
    statuses: list[StreamStatus] = []
    connected = asyncio.Event()
    renewed = asyncio.Event()

    def seen(status: StreamStatus) -> None:
        statuses.append(status)
        if status.kind == "connected":
            (renewed if connected.is_set() else connected).set()

    try:
        sim = await client.create_simulation("ttl")
        stream = client.stream(sim.id, on_status=seen, backoff=FAST)
        received: list[str | None] = []

        async def consume() -> None:
            async with stream:
                async for event in stream:
                    received.append(event.event_id)
                    if len(received) == 2:
                        return

        task = asyncio.create_task(consume())
        await asyncio.wait_for(connected.wait(), 10)
        first = await client.post_events(sim.id, example_event("vehicle_use", sim.id))
        await asyncio.wait_for(renewed.wait(), 15)
        second = await client.post_events(sim.id, example_event("vehicle_use", sim.id))
        await asyncio.wait_for(task, 10)
    finally:
        await client.aclose()
    assert received == first + second
    assert 4004 in [s.close_code for s in statuses if s.kind == "closed"]
