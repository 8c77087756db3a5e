"""The quota rules alone (``limits/quotas.py``): what is refused with which code, the token
bucket of events per second, the stored-bytes ledger and the bounded metric labels."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ridecast.limits.quotas import (
    OTHER,
    ByteLedger,
    QuotaPolicy,
    RunUsage,
    TokenBucket,
    bounded_labels,
    bytes_refusal,
    count_refusal,
    start_refusal,
)

POLICY = QuotaPolicy(runs=2, vehicles_per_run=50, vehicles=60, events_per_s=10.0,
                     simulations=3, templates=1, event_bytes=1000)


def test_a_start_within_every_quota_is_let_through() -> None:
    """One run of 50 vehicles beside one of 10: within 2 runs, 50 per run and 60 in all."""
    assert start_refusal(POLICY, RunUsage(runs=1, vehicles=10), 50) is None


def test_each_start_quota_has_its_own_code_and_status() -> None:
    """Too many vehicles for one run is 403 (retrying never helps); a full run slot or a
    full fleet is 429 (it frees when a run ends); details name the quota and the figures."""
    per_run = start_refusal(POLICY, RunUsage(), 51)
    runs = start_refusal(POLICY, RunUsage(runs=2, vehicles=2), 1)
    fleet = start_refusal(POLICY, RunUsage(runs=1, vehicles=20), 41)
    assert per_run is not None and runs is not None and fleet is not None
    assert (per_run.code, per_run.http_status) == ("quota_vehicles_per_run", 403)
    assert (runs.code, runs.http_status) == ("quota_runs", 429)
    assert (fleet.code, fleet.http_status) == ("quota_vehicles", 429)
    assert fleet.details == [{"quota": "quota_vehicles", "limit": 60, "used": 20,
                              "requested": 41}]


def test_counts_and_bytes_are_refused_at_their_limit() -> None:
    """The 4th simulation of 3 is refused, the 3rd is not; bytes up to the limit pass."""
    assert count_refusal("simulations", 3, 2) is None
    refused = count_refusal("simulations", 3, 3)
    assert refused is not None and (refused.code, refused.http_status) == (
        "quota_simulations", 403)
    assert bytes_refusal(1000, 900, 100) is None
    over = bytes_refusal(1000, 900, 101)
    assert over is not None and over.code == "quota_event_bytes"


def test_the_bucket_grants_its_burst_then_its_rate() -> None:
    """A new bucket holds its burst; dry, it says how long until one more token."""
    bucket = TokenBucket(rate=10.0, burst=10.0)
    assert bucket.take(0.0, 25) == (10, 0.0)
    granted, wait = bucket.take(0.0, 1)
    assert granted == 0 and abs(wait - 0.1) < 1e-9
    assert bucket.take(0.5, 25) == (5, 0.0)


@given(st.lists(st.tuples(st.floats(0, 10), st.integers(1, 50)), max_size=40))
def test_the_bucket_never_grants_more_than_burst_plus_rate_times_time(
    steps: list[tuple[float, int]],
) -> None:
    """Whatever the calls, tokens granted up to t are at most burst + rate * t."""
    bucket = TokenBucket(rate=10.0, burst=5.0)
    now, total = 0.0, 0
    for gap, want in steps:
        now += gap
        granted, _ = bucket.take(now, want)
        assert 0 <= granted <= want
        total += granted
        assert total <= 5 + 10 * now + 1e-6


def test_the_ledger_counts_pending_bytes_until_exchanged() -> None:
    """Appended bytes count at once; an exchange moves them into the cluster's totals; a
    failed exchange keeps them; a recount replaces every total."""
    ledger = ByteLedger()
    ledger.add(1, 100)
    assert ledger.held(1) == 100
    pending = ledger.take_pending()
    ledger.give_back(pending)
    assert ledger.held(1) == 100
    ledger.update({1: 100 + 400})  # another node had appended 400
    ledger.take_pending()
    assert ledger.held(1) == 500
    ledger.replace({2: 7})
    assert (ledger.held(1), ledger.held(2)) == (0, 7)


@given(st.dictionaries(st.integers(1, 10_000), st.integers(0, 10**9), max_size=300),
       st.integers(1, 20))
def test_labels_stay_bounded_and_keep_the_sum(usage: dict[int, int], most: int) -> None:
    """At most ``most`` organisations by id plus ``other``; nothing is lost from the sum."""
    labels = bounded_labels(usage, most)
    assert len(labels) <= most + 1
    assert sum(labels.values()) == sum(usage.values())
    named = [label for label in labels if label != OTHER]
    if OTHER in labels:
        smallest_named = min(labels[label] for label in named)
        assert all(value <= smallest_named for org, value in usage.items()
                   if str(org) not in labels)
