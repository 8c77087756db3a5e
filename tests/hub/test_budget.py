"""A stream's byte budget (RIDECAST_WS_SEND_QUEUE_BYTES), on the stream alone: whatever the
batches, it holds at most its budget plus one batch, closes 4100 when a batch finds the
budget spent, and lets go of everything at close. (``test_resources.py`` proves the same
against a real server's memory.)"""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from ridecast.auth.visibility import Principal
from ridecast.bus import StoredEvent
from ridecast.hub.connection import Stream
from ridecast.hub.frames import text_frame
from ridecast.hub.paths import Route


class StalledSink:
    """A socket whose peer never reads: it takes nothing, and waiting never ends."""

    raw = True
    can_wait = True

    def __init__(self) -> None:
        self.closed_with: int | None = None
        self._never: asyncio.Future[None] | None = None

    def writable(self) -> bool:
        return False

    def write_raw(self, data: bytes) -> None:  # pragma: no cover - never writable
        raise AssertionError("wrote to a socket that refuses data")

    async def send(self, frame: bytes) -> None:  # pragma: no cover - raw sink
        raise AssertionError("send on a raw sink")

    async def wait_writable(self) -> None:
        self._never = asyncio.get_running_loop().create_future()
        await self._never

    async def close(self, code: int, reason: str) -> None:
        self.closed_with = code

    async def wait_closed(self) -> None:
        return None


def _event(event_id: int, size: int) -> StoredEvent:
    body = b'{"simulation_id":1,"message_type":"vehicle_use","pad":"%s"}' % (b"x" * size)
    return StoredEvent(event_id, 1, 1, 1, "vehicle_use", body,
                       b'%s,"event_id":"%d"}' % (body[:-1], event_id))


BUDGET = 64 * 1024


@given(st.lists(st.lists(st.integers(0, 40_000), min_size=1, max_size=4), max_size=30))
def test_a_stalled_stream_holds_at_most_its_budget_plus_one_batch(
    batches: list[list[int]],
) -> None:
    """Batches of random sizes to a stream whose socket takes nothing."""

    async def run() -> None:
        sink = StalledSink()
        stream = Stream(sink, Principal(1, "u", 1), Route(None), queue_limit=10_000,
                        on_close=lambda _stream: None, queue_bytes=BUDGET)
        stream.go_live(0)
        next_id = 1
        for number, sizes in enumerate(batches):
            events = [_event(next_id + i, size) for i, size in enumerate(sizes)]
            next_id += len(sizes)
            data = b"".join(text_frame(e.frame) for e in events)
            backlog = stream.queued_bytes
            stream.take(events, data, number)
            await asyncio.sleep(0)  # the writer parks on the stalled socket
            if stream.closed:
                assert backlog >= BUDGET
                assert stream.queued_bytes == 0  # released at once, not at the socket's end
                break
            assert stream.queued_bytes <= BUDGET + len(data)
        await asyncio.sleep(0)
        if stream.closed:
            assert sink.closed_with == 4100
        stream.detach()

    asyncio.run(run())


def test_live_events_held_during_a_replay_are_bounded_in_bytes() -> None:
    """More bytes held than the budget while a replay runs: the hold is dropped and the
    overflow noted (the replay reads the log again), never kept beyond the budget."""

    async def run() -> None:
        stream = Stream(StalledSink(), Principal(1, "u", 1), Route(None), queue_limit=10_000,
                        on_close=lambda _stream: None, queue_bytes=BUDGET)
        stream.begin_replay()
        for event_id in range(1, 6):
            stream.take([_event(event_id, 20_000)], b"", event_id)
        assert stream.take_overflow()
        assert not stream.take_overflow()
        stream.detach()

    asyncio.run(run())
