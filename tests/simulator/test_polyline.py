"""Polyline encoding is Google's standard algorithm at precision 5."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.simulator.core.polyline import decode, dedupe, encode


def test_reference_example() -> None:
    """Google's documented example encodes to its documented string."""
    points = [(38.5, -120.2), (40.7, -120.95), (43.252, -126.453)]
    assert encode(points) == "_p~iF~ps|U_ulLnnqC_mqNvxq`@"
    assert decode("_p~iF~ps|U_ulLnnqC_mqNvxq`@") == points


@given(st.lists(st.tuples(st.floats(-90, 90), st.floats(-180, 180)), max_size=30))
def test_round_trip_within_precision(points: list[tuple[float, float]]) -> None:
    """decode(encode(p)) equals p rounded to 1e-5 degrees."""
    decoded = decode(encode(points))
    assert len(decoded) == len(points)
    for (lat, lon), (dlat, dlon) in zip(points, decoded, strict=True):
        assert abs(lat - dlat) <= 0.5e-5 + 1e-9 and abs(lon - dlon) <= 0.5e-5 + 1e-9


def test_truncated_is_an_error() -> None:
    """A cut-off polyline is refused, not misread."""
    with pytest.raises(ValueError):
        decode("_p~iF~ps|")
    with pytest.raises(ValueError):
        decode("_p~iF")


def test_dedupe() -> None:
    """Consecutive repeats are dropped, others kept."""
    assert dedupe([(1.0, 1.0), (1.0, 1.0), (2.0, 2.0), (1.0, 1.0)]) == [
        (1.0, 1.0), (2.0, 2.0), (1.0, 1.0)]
