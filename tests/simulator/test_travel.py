"""Straight-line travel: distances, times and positions along a leg."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ridecast.simulator.core.travel import StraightLineTravel, bearing_deg, haversine_m

PARIS = (48.8566, 2.3522)
LONDON = (51.5074, -0.1278)


def test_haversine_known_distance() -> None:
    """Paris-London is about 343.5 km on the great circle."""
    assert abs(haversine_m(PARIS, LONDON) - 343_500) < 1_000


def test_duration_at_speed() -> None:
    """36 km/h covers 10 m per second."""
    travel = StraightLineTravel(36.0)
    assert abs(travel.duration_s(PARIS, LONDON) - haversine_m(PARIS, LONDON) / 10.0) < 1e-6


def test_bearing_cardinal() -> None:
    """North is 0 degrees, east is 90."""
    assert abs(bearing_deg((0.0, 0.0), (1.0, 0.0))) < 1e-9
    assert abs(bearing_deg((0.0, 0.0), (0.0, 1.0)) - 90.0) < 1e-9


@given(st.floats(0, 2000))
def test_position_on_segment(elapsed: float) -> None:
    """A vehicle is on its leg, and at the end once the leg's time has passed."""
    travel = StraightLineTravel(30.0)
    a, b = (52.50, 13.40), (52.53, 13.45)
    (lat, lon), _ = travel.position(a, b, elapsed)
    f = (lat - a[0]) / (b[0] - a[0])
    assert 0.0 <= f <= 1.0 + 1e-12
    assert abs((lon - a[1]) - f * (b[1] - a[1])) < 1e-9
    if elapsed >= travel.duration_s(a, b):
        assert (lat, lon) == b
