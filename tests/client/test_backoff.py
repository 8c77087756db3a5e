"""The reconnect policy: close-code classification and the back-off schedule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.client.backoff import Action, Backoff, classify_close, classify_handshake
from ridecast.errors import ERRORS


@given(st.integers(4000, 4099).filter(lambda c: c not in (4003, 4004)))
def test_do_not_reconnect_range_stops(code: int) -> None:
    """Every code in 4000-4099 except the token ones stops the stream."""
    assert classify_close(code) is Action.STOP


@given(st.integers(4100, 4199))
def test_reconnect_range_reconnects(code: int) -> None:
    """Every code in 4100-4199 reconnects with back-off."""
    assert classify_close(code) is Action.RECONNECT


@pytest.mark.parametrize("code", [4003, 4004])
def test_token_codes_refresh_the_token(code: int) -> None:
    """An unknown or expired token is fixed by fetching a fresh one."""
    assert classify_close(code) is Action.REFRESH_TOKEN


@pytest.mark.parametrize("code", [None, 1000, 1001, 1006, 1011, 1012, 1013])
def test_drops_and_going_away_reconnect(code: int | None) -> None:
    """A network drop, a normal close, 1001 and server errors reconnect."""
    assert classify_close(code) is Action.RECONNECT


@pytest.mark.parametrize("code", [1002, 1003, 1007, 1008, 1009, 1010])
def test_protocol_faults_stop(code: int) -> None:
    """Closes that blame this client's frames would loop if retried, so they stop."""
    assert classify_close(code) is Action.STOP


def test_every_table_close_code_is_classified_by_its_range() -> None:
    """The server's error table and the client's ranges agree for every close code."""
    for spec in ERRORS.values():
        code = spec.ws_close_code
        if code is None:
            continue
        action = classify_close(code)
        if 4100 <= code <= 4199 or code in (1001, 1011):
            assert action is Action.RECONNECT, spec.code
        elif 4000 <= code <= 4099:
            assert action in (Action.STOP, Action.REFRESH_TOKEN), spec.code


@pytest.mark.parametrize(
    ("status", "action"),
    [(401, Action.REFRESH_TOKEN), (503, Action.RECONNECT), (500, Action.RECONNECT),
     (429, Action.RECONNECT), (404, Action.STOP), (403, Action.STOP), (400, Action.STOP)],
)
def test_handshake_status(status: int, action: Action) -> None:
    """An HTTP refusal of the upgrade maps to the same three actions."""
    assert classify_handshake(status) is action


backoffs = st.builds(
    lambda initial, extra, factor, jitter: Backoff(initial, factor, initial + extra, jitter),
    st.floats(0, 10), st.floats(0, 100), st.floats(1, 4), st.floats(0, 1),
)


@given(backoffs, st.integers(0, 10_000), st.floats(0, 1, exclude_max=True))
def test_delay_stays_within_the_jitter_band(backoff: Backoff, attempt: int, rand: float) -> None:
    """Each delay lies between (1 - jitter) x ceiling and the ceiling, never above maximum."""
    ceiling = backoff.ceiling(attempt)
    delay = backoff.delay(attempt, rand)
    assert ceiling <= backoff.maximum
    assert ceiling * (1 - backoff.jitter) - 1e-9 <= delay <= ceiling + 1e-9


@given(backoffs, st.integers(0, 200))
def test_ceiling_grows_monotonically(backoff: Backoff, attempt: int) -> None:
    """The ceiling never shrinks from one retry to the next."""
    assert backoff.ceiling(attempt) <= backoff.ceiling(attempt + 1)


def test_default_schedule_doubles_to_the_cap() -> None:
    """The default ceilings are 0.5, 1, 2, 4 ... seconds, capped at 30."""
    backoff = Backoff()
    assert [backoff.ceiling(n) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert backoff.delay(3, 0.0) == 0.0 and backoff.delay(3, 0.5) == 2.0


@pytest.mark.parametrize("kwargs", [{"initial": -1}, {"factor": 0.5}, {"jitter": 2},
                                    {"initial": 5, "maximum": 1}])
def test_invalid_backoff_is_refused(kwargs: dict[str, float]) -> None:
    """A schedule that could go negative or shrink is refused at construction."""
    with pytest.raises(ValueError):
        Backoff(**kwargs)
