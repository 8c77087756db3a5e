"""``metrics.LoopHistogram`` exposes what ``prometheus_client``'s ``Histogram`` would."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ridecast.metrics import REGISTRY, WEBHOOK_LATENCY, LoopHistogram

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 10)


def exposition(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines()
            if "_created" not in line]


@given(st.lists(st.one_of(st.sampled_from(BUCKETS),
                          st.floats(min_value=0, max_value=100, allow_nan=False)),
                max_size=60))
def test_the_exposition_is_prometheus_clients(values: list[float]) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("x_seconds", "doc", registry=theirs, buckets=BUCKETS)
    histogram = LoopHistogram("x_seconds", "doc", registry=ours, buckets=BUCKETS)
    for value in values:
        reference.observe(value)
        histogram.observe(value)
    assert exposition(ours) == exposition(theirs)


def test_a_bound_is_inclusive_and_infinity_closes_the_buckets() -> None:
    registry = CollectorRegistry()
    histogram = LoopHistogram("y_seconds", "doc", registry=registry, buckets=(1.0, 2.0))
    for value in (1.0, 1.5, 2.0, 7.0, math.inf):
        histogram.observe(value)
    lines = exposition(registry)
    assert 'y_seconds_bucket{le="1.0"} 1.0' in lines
    assert 'y_seconds_bucket{le="2.0"} 3.0' in lines
    assert 'y_seconds_bucket{le="+Inf"} 5.0' in lines
    assert "y_seconds_count 5.0" in lines


def test_the_webhook_latency_is_in_the_servers_registry() -> None:
    before = [line for line in exposition(REGISTRY)
              if line.startswith("ridecast_webhook_attempt_seconds_count")]
    WEBHOOK_LATENCY.observe(0.003)
    after = [line for line in exposition(REGISTRY)
             if line.startswith("ridecast_webhook_attempt_seconds_count")]
    assert len(before) == len(after) == 1
    assert float(after[0].split()[1]) == float(before[0].split()[1]) + 1
    assert "# TYPE ridecast_webhook_attempt_seconds histogram" in exposition(REGISTRY)
