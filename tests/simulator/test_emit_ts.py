"""The emitter's timestamp formatter is ``datetime``'s, character for character."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from ridecast.simulator.core.emit import Emitter

EPOCH = datetime(2024, 5, 6, 6, 0, tzinfo=UTC).timestamp()


def reference(epoch: float, t: float) -> str:
    return datetime.fromtimestamp(epoch + t, UTC).isoformat(timespec="milliseconds")


@settings(max_examples=2000)
@given(st.floats(0, 10 * 86400, allow_nan=False), st.sampled_from([EPOCH, EPOCH + 0.25, 0.0]))
def test_ts_matches_datetime(t: float, epoch: float) -> None:
    assert Emitter(1, epoch).ts(t) == reference(epoch, t)


def test_ts_on_boundaries() -> None:
    """Near whole seconds and half microseconds, where rounding decides the digits."""
    emitter = Emitter(1, EPOCH)
    for base in (0.0, 59.0, 3599.0, 86399.0, 1234.5):
        for delta in (0.0, 1e-7, 4.9e-7, 5e-7, 5.1e-7, 0.0005, 0.0009995, 0.9994999,
                      0.9995, 0.9999994, 0.9999995, 0.9999996):
            for t in (base + delta, base - delta):
                if t >= 0:
                    assert emitter.ts(t) == reference(EPOCH, t), t


@given(st.lists(st.floats(0, 86400, allow_nan=False), min_size=1, max_size=60))
def test_remembered_timestamps_match_datetime(times: list[float]) -> None:
    """One emitter asked again and again (repeats, and past a full memo) answers as a new
    one does."""
    import ridecast.simulator.core.emit as emit

    emitter = Emitter(1, EPOCH)
    for t in [*times, *reversed(times), *times]:
        assert emitter.ts(t) == reference(EPOCH, t)
    small = Emitter(1, EPOCH)
    saved, emit.TS_MEMO = emit.TS_MEMO, 4
    try:
        for t in [*times, *times]:
            assert small.ts(t) == reference(EPOCH, t)
        assert len(small._ts_memo) <= 4
    finally:
        emit.TS_MEMO = saved
