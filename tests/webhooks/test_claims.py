"""The claim planner and the failing-streak rule (pure): order, head-of-line, per-URL limits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ridecast.webhooks.claims import Row, chunk_size, is_busy, plan_claim
from ridecast.webhooks.retry import quiet_gap, streak_start

NOW = 1000.0


def row(id: int, sim: int = 1, *, url: str = "http://a/", ordered: bool = True,
        status: str = "pending", next_at: float = NOW, lease: float | None = None,
        token: str | None = None) -> Row:
    return Row(id, sim, url, id, ordered, status, next_at, lease, token)


def ids(units: list[list[Row]]) -> list[list[int]]:
    return [[r.id for r in unit] for unit in units]


def test_a_lane_is_its_head_run_in_event_order() -> None:
    """An ordered simulation yields one unit: its due deliveries from the head, in order."""
    rows = [row(3), row(1), row(2), row(4, next_at=NOW + 5), row(5)]
    assert ids(plan_claim(rows, now=NOW, per_endpoint=8, unit_rows=10, max_units=10)) == [
        [1, 2, 3]]


def test_a_head_waiting_for_retry_holds_its_lane() -> None:
    """Head-of-line: nothing behind a delivery that waits for its retry is handed out."""
    rows = [row(1, next_at=NOW + 30), row(2), row(3)]
    assert plan_claim(rows, now=NOW, per_endpoint=8, unit_rows=10, max_units=10) == []


def test_a_leased_lane_is_not_handed_out_again_until_its_lease_runs_out() -> None:
    """A lane with a delivery in flight is skipped; once the lease ran out it is due again."""
    rows = [row(1, status="delivering", lease=NOW + 1, token="t"), row(2)]
    assert plan_claim(rows, now=NOW, per_endpoint=8, unit_rows=10, max_units=10) == []
    assert ids(plan_claim(rows, now=NOW + 2, per_endpoint=8, unit_rows=10,
                          max_units=10)) == [[1, 2]]


def test_unordered_deliveries_come_in_parallel_chunks_within_the_limit() -> None:
    """Unordered rows of one URL: chunks of unit_rows, at most the free slots of the URL."""
    rows = [row(i, ordered=False) for i in range(1, 11)]
    rows.append(row(99, sim=2, ordered=False, status="delivering", lease=NOW + 5, token="x"))
    units = plan_claim(rows, now=NOW, per_endpoint=3, unit_rows=3, max_units=10)
    assert ids(units) == [[1, 2, 3], [4, 5, 6]]


def test_a_backlog_goes_in_full_chunks_and_fewer_rows_are_shared_among_all_slots() -> None:
    """A few due rows go out in parallel, one to a slot; a backlog in chunks of chunk_rows;
    in between, the due rows are shared among all the URL's slots (the chunks that busy
    slots take later end about when these do)."""
    def sizes(count: int, chunk_rows: int = 8) -> list[int]:
        rows = [row(i, ordered=False) for i in range(1, count + 1)]
        rows.append(row(99, sim=2, ordered=False, status="delivering", lease=NOW + 5,
                        token="x"))
        return [len(unit) for unit in plan_claim(rows, now=NOW, per_endpoint=4, unit_rows=2,
                                                 max_units=10, chunk_rows=chunk_rows)]

    assert sizes(2) == [1, 1]
    assert sizes(10) == [3, 3, 3]  # four slots, three free: ceil(10 / 4), one row waits
    assert sizes(23) == [6, 6, 6]  # under a full chunk per free slot (3 * 8): shared by 4
    assert sizes(24) == [8, 8, 8]  # a backlog: full chunks
    assert sizes(100) == [8, 8, 8]
    assert chunk_size(0, 3, 4, 8) == 1
    assert chunk_size(5, 0, 4, 8) == 2


def test_units_are_handed_out_oldest_first_across_endpoints() -> None:
    """The unit with the oldest first event goes first, whatever its URL."""
    rows = [row(5, sim=1, url="http://a/"), row(2, sim=2, url="http://b/"),
            row(9, sim=3, url="http://c/")]
    assert ids(plan_claim(rows, now=NOW, per_endpoint=1, unit_rows=5, max_units=2)) == [
        [2], [5]]


rows_strategy = st.lists(
    st.builds(
        row,
        id=st.integers(1, 10_000),
        sim=st.integers(1, 4),
        url=st.sampled_from(["http://a/", "http://b/"]),
        ordered=st.booleans(),
        status=st.sampled_from(["pending", "delivering"]),
        next_at=st.sampled_from([NOW - 1, NOW, NOW + 1]),
        lease=st.sampled_from([None, NOW - 1, NOW + 1]),
        token=st.sampled_from([None, "t1", "t2", "t3"]),
    ),
    max_size=40,
    unique_by=lambda r: r.id,
)


@given(rows_strategy, st.integers(1, 4), st.integers(1, 5), st.integers(1, 6),
       st.integers(1, 12))
def test_plan_properties(rows: list[Row], per_endpoint: int, unit_rows: int,
                         max_units: int, chunk_rows: int) -> None:
    """Any plan: no row twice, units in event order, at most one unit per ordered lane and
    none for a busy lane, a lane's unit is its head run, a unit no longer than its kind's
    limit, and per-URL slots never exceeded."""
    units = plan_claim(rows, now=NOW, per_endpoint=per_endpoint, unit_rows=unit_rows,
                       max_units=max_units, chunk_rows=chunk_rows)
    taken = [r.id for unit in units for r in unit]
    assert len(taken) == len(set(taken))
    assert len(units) <= max_units
    busy_tokens: dict[str, set[str]] = {}
    for r in rows:
        if is_busy(r, NOW):
            busy_tokens.setdefault(r.url, set()).add(r.claim_token or f"row-{r.id}")
    per_url: dict[str, int] = {}
    lanes_seen: set[int] = set()
    for unit in units:
        assert 1 <= len(unit) <= (unit_rows if unit[0].ordered else chunk_rows)
        assert [r.event_id for r in unit] == sorted(r.event_id for r in unit)
        per_url[unit[0].url] = per_url.get(unit[0].url, 0) + 1
        if unit[0].ordered:
            sim = unit[0].simulation_id
            assert sim not in lanes_seen
            lanes_seen.add(sim)
            lane = sorted((r for r in rows if r.ordered and r.simulation_id == sim),
                          key=lambda r: r.event_id)
            assert not any(is_busy(r, NOW) for r in lane)
            assert [r.id for r in lane[:len(unit)]] == [r.id for r in unit]
    for url, count in per_url.items():
        assert count + len(busy_tokens.get(url, set())) <= per_endpoint


def test_a_quiet_gap_starts_a_new_failing_streak() -> None:
    """A failure long after the previous one starts the clock again; close ones continue it."""
    day = 24 * 3600.0
    gap = quiet_gap([5, 30, 10800], jitter=0.2, timeout_s=10, lease_s=60)
    assert gap == 10800 * 1.2 + 70
    assert streak_start(None, 50.0, quiet_gap_s=gap) == 50.0
    assert streak_start((0.0, 3000.0), 3100.0, quiet_gap_s=gap) == 0.0
    # First failure at t=0, nothing for a day, one failure: a new streak, not "failing 24 h".
    assert streak_start((0.0, 0.0), day + 1, quiet_gap_s=gap) == day + 1
