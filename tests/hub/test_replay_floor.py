"""After a ``since=`` replay, an event the replay sent that the bus hands over late is not
sent again (seen on a cluster: committed before the replay's read, it reached the other
node's hub after the stream went live)."""

from __future__ import annotations

from ridecast.auth.visibility import Principal
from ridecast.bus import StoredEvent
from ridecast.hub.connection import Stream
from ridecast.hub.frames import text_frame
from ridecast.hub.paths import Route


class RawSink:
    """A socket that always takes data; records what was written."""

    raw = True
    can_wait = False

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write_raw(self, data: bytes) -> None:
        self.written.append(data)

    async def send(self, frame: bytes) -> None:  # pragma: no cover - raw sink
        self.written.append(text_frame(frame))

    async def wait_writable(self) -> None:  # pragma: no cover - always writable
        return None

    async def close(self, code: int, reason: str) -> None:
        return None

    async def wait_closed(self) -> None:
        return None


def _event(event_id: int) -> StoredEvent:
    body = b'{"simulation_id":1,"message_type":"vehicle_use"}'
    return StoredEvent(event_id, 1, 1, 1, "vehicle_use", body,
                       b'%s,"event_id":"%d"}' % (body[:-1], event_id))


def _batch(stream: Stream, ids: range) -> None:
    events = [_event(i) for i in ids]
    stream.take(events, b"".join(text_frame(e.frame) for e in events), ids[0])


def _sent(sink: RawSink) -> bytes:
    return b"".join(sink.written)


async def test_events_the_replay_sent_are_dropped_when_the_bus_brings_them_late() -> None:
    sink = RawSink()
    stream = Stream(sink, Principal(1, "u", 1), Route(1), queue_limit=100,
                    on_close=lambda _stream: None)
    stream.begin_replay()
    for event_id in range(1, 6):
        await stream.send_replayed(_event(event_id).frame)
    stream.go_live(5)  # nothing was held: events up to 5 may still come from the bus
    _batch(stream, range(3, 6))  # all sent by the replay already
    _batch(stream, range(5, 8))  # 5 again, then 6 and 7
    _batch(stream, range(8, 9))
    expected = b"".join(text_frame(_event(i).frame) for i in range(1, 9))
    assert _sent(sink) == expected
    assert stream.sent == 8


async def test_held_events_newer_than_the_replay_go_out_once_and_lift_the_floor() -> None:
    sink = RawSink()
    stream = Stream(sink, Principal(1, "u", 1), Route(1), queue_limit=100,
                    on_close=lambda _stream: None)
    stream.begin_replay()
    _batch(stream, range(4, 7))  # held during the replay; 4 and 5 will be replayed too
    for event_id in range(1, 6):
        await stream.send_replayed(_event(event_id).frame)
    stream.go_live(5)
    _batch(stream, range(7, 9))
    expected = b"".join(text_frame(_event(i).frame) for i in range(1, 9))
    assert _sent(sink) == expected
