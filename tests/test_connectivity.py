"""The lines a node logs about a link (Redis, the database) that breaks and comes back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ridecast.connectivity import Connectivity


def test_a_break_a_summary_and_a_recovery() -> None:
    """One line when it breaks, silence within the interval, a summary that counts the
    failures since the last line, one line when it is back, and nothing while it is up."""
    link = Connectivity("Redis bus", 10.0, "retrying")
    assert link.succeeded(0.0) is None
    first = link.failed("publish", ConnectionError("refused"), 1.0)
    assert first == "Redis bus unreachable (publish: ConnectionError: refused); retrying"
    assert link.failed("read", ConnectionError("refused"), 5.0) is None
    assert link.failed("read", TimeoutError(), 10.9) is None
    summary = link.failed("publish", ConnectionError("refused"), 11.0)
    assert summary == ("Redis bus still unreachable after 10 s: 3 more failures since the "
                       "last report (last publish: ConnectionError: refused)")
    assert link.succeeded(12.5) == ("Redis bus reachable again after 11.5 s "
                                    "(4 failed operations meanwhile)")
    assert link.succeeded(13.0) is None
    assert link.failed("read", "gone", 14.0) is not None  # a new outage: a new first line


@given(st.lists(st.tuples(st.floats(0, 5), st.booleans()), max_size=300),
       st.floats(0.1, 20))
def test_lines_are_bounded_by_changes_and_time(steps: list[tuple[float, bool]],
                                               interval: float) -> None:
    """Whatever the failures and successes, the lines are at most one per change of state
    plus one per interval of a continuous outage."""
    link = Connectivity("store", interval)
    now, lines, changes, down_time = 0.0, 0, 0, 0.0
    was_up = True
    for gap, ok in steps:
        now += gap
        if not was_up:
            down_time += gap
        line = link.succeeded(now) if ok else link.failed("query", "refused", now)
        lines += line is not None
        changes += ok != was_up
        was_up = ok
        assert link.up == ok
    assert lines <= changes + down_time / interval + 1
