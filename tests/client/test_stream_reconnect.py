"""EventStream's reconnect loop against a scripted websocket server on a real socket.

The scripted server plays the hub's close codes one connection at a time, so each reaction
(resume with since=, fresh token, typed stop) is checked deterministically.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve

from ridecast.client import (
    Backoff,
    CursorExpired,
    StreamAuthError,
    StreamNotFound,
    StreamStatus,
)
from ridecast.client.protocol import plan_channel
from ridecast.client.stream import EventStream

NO_WAIT = Backoff(initial=0.0, maximum=0.0)


def frame(event_id: int, message_type: str = "vehicle_use") -> bytes:
    data = ({"vehicle_id": 1, "action": "disabled"} if message_type == "vehicle_use"
            else {"booking_ids": [1]})
    return orjson.dumps({
        "simulation_id": 1, "agent_type": "vehicle", "message_type": message_type,
        "data": data, "current_sim_ts": "2026-11-22T03:00:00+00:00",
        "server_ts": "2026-11-22T03:00:00+00:00", "transmit_to_websocket": True,
        "event_id": str(event_id),
    })


@dataclass
class Script:
    """What the server does on each connection: send frames, then close with a code."""

    steps: list[tuple[list[bytes], int]]
    seen: list[dict[str, list[str]]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    async def handler(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        parts = urlsplit(ws.request.path)
        self.paths.append(parts.path)
        self.seen.append(parse_qs(parts.query))
        frames, code = self.steps[min(len(self.seen), len(self.steps)) - 1]
        for raw in frames:
            await ws.send(raw.decode())
        await ws.close(code, "scripted")


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[Script, str]]:
    script = Script([])
    async with serve(script.handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield script, f"ws://127.0.0.1:{port}"


def tokens() -> tuple[list[str], object]:
    issued: list[str] = []
    counter = itertools.count(1)

    async def source() -> str:
        issued.append(f"tok-{next(counter)}")
        return issued[-1]

    return issued, source


async def take(stream: EventStream, n: int) -> list[str]:
    got: list[str] = []
    async with stream:
        async for event in stream:
            got.append(str(event.event_id))
            if len(got) == n:
                break
    return got


async def test_resumes_from_last_event_id_after_reconnectable_closes(
    scripted: tuple[Script, str],
) -> None:
    """After 4100, 1001 and 1011 the stream reconnects with since=<last id>: no gap, no repeat."""
    script, base = scripted
    script.steps = [([frame(1), frame(2)], 4100), ([frame(3)], 1001), ([], 1011),
                    ([frame(4), frame(5)], 1000)]
    _issued, source = tokens()
    statuses: list[StreamStatus] = []
    stream = EventStream(base, source, plan_channel(1, None), backoff=NO_WAIT,  # type: ignore[arg-type]
                         on_status=statuses.append)
    assert await asyncio.wait_for(take(stream, 5), 10) == ["1", "2", "3", "4", "5"]
    assert [q.get("since") for q in script.seen[:4]] == [None, ["2"], ["3"], ["3"]]
    assert stream.last_event_id == "5"
    assert [s.close_code for s in statuses if s.kind == "closed"][:3] == [4100, 1001, 1011]


async def test_starts_from_given_since(scripted: tuple[Script, str]) -> None:
    """since= given by the caller is sent on the first connection."""
    script, base = scripted
    script.steps = [([frame(8)], 1000)]
    _issued, source = tokens()
    stream = EventStream(base, source, plan_channel(None, ["vehicle_use"]), since="7",  # type: ignore[arg-type]
                         backoff=NO_WAIT)
    assert await asyncio.wait_for(take(stream, 1), 10) == ["8"]
    assert script.seen[0]["since"] == ["7"]
    assert script.paths[0] == "/simulation_events/vehicle_use"


@pytest.mark.parametrize("code", [4003, 4004])
async def test_fresh_token_on_token_close(scripted: tuple[Script, str], code: int) -> None:
    """An unknown or expired token is replaced by a fresh one and the stream resumes."""
    script, base = scripted
    script.steps = [([frame(1)], code), ([frame(2)], 1000)]
    issued, source = tokens()
    stream = EventStream(base, source, plan_channel(1, None), backoff=NO_WAIT)  # type: ignore[arg-type]
    assert await asyncio.wait_for(take(stream, 2), 10) == ["1", "2"]
    assert [q["token"] for q in script.seen[:2]] == [["tok-1"], ["tok-2"]]
    assert script.seen[1]["since"] == ["1"]
    assert issued[:2] == ["tok-1", "tok-2"]


async def test_fresh_token_refused_again_stops(scripted: tuple[Script, str]) -> None:
    """A fresh token refused straight away raises StreamAuthError instead of looping."""
    script, base = scripted
    script.steps = [([], 4004)]
    _issued, source = tokens()
    stream = EventStream(base, source, plan_channel(1, None), backoff=NO_WAIT)  # type: ignore[arg-type]
    with pytest.raises(StreamAuthError):
        await asyncio.wait_for(take(stream, 1), 10)
    assert len(script.seen) == 2


@pytest.mark.parametrize(
    ("code", "error"),
    [(4006, StreamNotFound), (4005, StreamNotFound), (4010, CursorExpired),
     (4002, StreamAuthError)],
)
async def test_do_not_reconnect_codes_raise(
    scripted: tuple[Script, str], code: int, error: type[Exception]
) -> None:
    """A 4000-4099 close raises its typed exception after the frames already received."""
    script, base = scripted
    script.steps = [([frame(1)], code)]
    _issued, source = tokens()
    stream = EventStream(base, source, plan_channel(1, None), backoff=NO_WAIT)  # type: ignore[arg-type]
    got: list[str] = []
    with pytest.raises(error) as raised:
        async for event in stream:
            got.append(str(event.event_id))
    assert got == ["1"] and len(script.seen) == 1
    assert raised.value.close_code == code  # type: ignore[attr-defined]


async def test_client_side_filter_keeps_cursor_of_skipped_events(
    scripted: tuple[Script, str],
) -> None:
    """Several types share one connection; skipped types still advance the resume cursor."""
    script, base = scripted
    script.steps = [([frame(1, "vehicle_use"), frame(2, "bookings_cancellation")], 4100),
                    ([frame(3, "vehicle_use")], 1000)]
    _issued, source = tokens()
    stream = EventStream(base, source, plan_channel(1, ["vehicle_use", "offers"]),  # type: ignore[arg-type]
                         backoff=NO_WAIT)
    assert await asyncio.wait_for(take(stream, 2), 10) == ["1", "3"]
    assert script.paths[0] == "/simulation_events/1"
    assert script.seen[1]["since"] == ["2"]


async def test_network_errors_back_off_until_the_server_is_up() -> None:
    """With nothing listening, the stream waits with growing delays, then connects."""
    script = Script([([frame(1)], 1000)])
    statuses: list[StreamStatus] = []
    three_waits = asyncio.Event()

    def record(status: StreamStatus) -> None:
        statuses.append(status)
        if sum(s.kind == "waiting" for s in statuses) >= 3:
            three_waits.set()

    async with serve(script.handler, "127.0.0.1", 0) as probe:
        port = next(iter(probe.sockets)).getsockname()[1]
    _issued, source = tokens()
    stream = EventStream(f"ws://127.0.0.1:{port}", source, plan_channel(1, None),  # type: ignore[arg-type]
                         backoff=Backoff(initial=0.01, maximum=0.05), on_status=record,
                         rand=lambda: 1.0)

    done = asyncio.Event()

    async def later() -> None:
        await three_waits.wait()
        async with serve(script.handler, "127.0.0.1", port):
            await done.wait()

    server_task = asyncio.create_task(later())
    try:
        assert await asyncio.wait_for(take(stream, 1), 10) == ["1"]
    finally:
        done.set()
        await server_task
    delays = [s.delay for s in statuses if s.kind == "waiting"][:3]
    assert delays == [0.01, 0.02, 0.04]


async def test_aclose_from_another_task_ends_the_stream(scripted: tuple[Script, str]) -> None:
    """aclose() while another task waits on the stream ends that iteration cleanly."""
    script, base = scripted
    script.steps = [([frame(1)], 4100)]
    _issued, source = tokens()
    stream = EventStream(base, source, plan_channel(1, None),  # type: ignore[arg-type]
                         backoff=Backoff(initial=5, maximum=5, jitter=0))
    got: list[str] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for event in stream:
            got.append(str(event.event_id))
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 10)
    await stream.aclose()
    await asyncio.wait_for(task, 10)
    assert got == ["1"]
