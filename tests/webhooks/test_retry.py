"""The retry policy: verdicts per status, schedule with jitter, Retry-After (pure)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from ridecast.webhooks.retry import (
    MAX_RETRY_AFTER_S,
    ErrorClass,
    Verdict,
    error_class_of_status,
    honours_retry_after,
    next_delay,
    parse_retry_after,
    verdict,
)

schedules = st.lists(st.floats(min_value=0, max_value=1e5), min_size=1, max_size=10)


@given(status=st.integers(min_value=100, max_value=599))
def test_verdict_per_status(status: int) -> None:
    """2xx succeeds, 410 disables, everything else (3xx included) is retried."""
    expected = (
        Verdict.SUCCEEDED if 200 <= status < 300
        else Verdict.DISABLE if status == 410 else Verdict.RETRY
    )
    assert verdict(status) is expected
    cls = error_class_of_status(status)
    assert (cls is None) == (200 <= status < 300)
    if 300 <= status < 400:
        assert cls is ErrorClass.REDIRECT


def test_no_answer_is_retried() -> None:
    """A time-out or connection error (no status) is retried."""
    assert verdict(None) is Verdict.RETRY
    assert honours_retry_after(429) and honours_retry_after(503) and not honours_retry_after(500)


@given(schedule=schedules, jitter=st.floats(min_value=0, max_value=1), seed=st.integers(),
       attempts=st.integers(min_value=-2, max_value=15))
def test_delay_within_jitter_band_and_gives_up_after_schedule(
    schedule: list[float], jitter: float, seed: int, attempts: int
) -> None:
    """The n-th retry waits schedule[n-1] ± jitter; past the schedule there is no retry."""
    delay = next_delay(attempts, schedule, jitter=jitter, rng=random.Random(seed))
    if attempts < 1 or attempts > len(schedule):
        assert delay is None
        return
    assert delay is not None
    base = schedule[attempts - 1]
    assert base * (1 - jitter) - 1e-6 <= delay <= base * (1 + jitter) + 1e-6


@given(schedule=schedules, retry_after=st.floats(min_value=0, max_value=MAX_RETRY_AFTER_S))
def test_retry_after_is_a_floor(schedule: list[float], retry_after: float) -> None:
    """Retry-After is never undercut, and never adds attempts beyond the schedule."""
    rng = random.Random(1)
    delay = next_delay(1, schedule, jitter=0.2, rng=rng, retry_after=retry_after)
    assert delay is not None and delay >= retry_after
    assert next_delay(len(schedule) + 1, schedule, jitter=0.2, rng=rng,
                      retry_after=retry_after) is None


def test_same_seed_same_delays() -> None:
    """A seeded RNG makes the jitter reproducible."""
    a = [next_delay(i, [5, 30, 120], jitter=0.5, rng=random.Random(7)) for i in (1, 2, 3)]
    b = [next_delay(i, [5, 30, 120], jitter=0.5, rng=random.Random(7)) for i in (1, 2, 3)]
    assert a == b


def test_parse_retry_after_forms() -> None:
    """Seconds and HTTP dates are read; junk, absence and NaN give None; huge values clamp."""
    assert parse_retry_after("120", now=0) == 120
    assert parse_retry_after(" 0 ", now=0) == 0
    assert parse_retry_after("-5", now=0) == 0
    assert parse_retry_after("1e12", now=0) == MAX_RETRY_AFTER_S
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480 - 60) == 60
    assert parse_retry_after("soon", now=0) is None
    assert parse_retry_after("nan", now=0) is None
    assert parse_retry_after(None, now=0) is None


@given(st.text(max_size=40))
def test_parse_retry_after_never_raises(value: str) -> None:
    """Any header value gives a bounded number or None."""
    seconds = parse_retry_after(value, now=1_000_000.0)
    assert seconds is None or 0 <= seconds <= MAX_RETRY_AFTER_S
