"""Demand with a shape: the time-of-day profile and the hot spots, seen in the event stream."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.errors import BadRequest
from ridecast.simulator import Engine, SimulatorSettings, read_settings
from ridecast.simulator.core.demand import hourly_rates
from ridecast.simulator.core.settings import DEFAULT_DEMAND_PROFILE, Circle, HotSpot

CET = timezone(timedelta(hours=1))


def bookings_of(settings: SimulatorSettings, start: datetime) -> list[dict[str, Any]]:
    engine = Engine(1, settings, start)
    out: list[dict[str, Any]] = []
    while not engine.finished:
        out.extend(b for e in engine.advance(engine.now + 3600.0)
                   if e["message_type"] == "bookings" for b in e["data"]["bookings"])
    return out


def test_bookings_per_hour_follow_the_profile_over_a_day() -> None:
    """A simulated day from local midnight (+01:00): per clock hour, the count of bookings is
    within 4 standard deviations of the profile's expectation, and the chi-square statistic
    over the 24 hours is below the 99.9% quantile (49.7 for 23 degrees of freedom)."""
    settings = SimulatorSettings(seed=11, vehicles=0, bookings_per_hour=200.0,
                                 duration_s=86_400.0, speed="max", network="straight",
                                 performance_tracker_enabled=False)
    start = datetime(2024, 5, 6, 0, 0, tzinfo=CET)
    counts = [0] * 24
    for booking in bookings_of(settings, start):
        counts[datetime.fromisoformat(booking["requested_ts"]).astimezone(CET).hour] += 1
    expected = hourly_rates(settings)
    assert sum(counts) == round(sum(expected))
    chi2 = 0.0
    for hour, (seen, want) in enumerate(zip(counts, expected, strict=True)):
        assert abs(seen - want) <= 4 * math.sqrt(want) + 1, (hour, seen, want)
        chi2 += (seen - want) ** 2 / want
    assert chi2 < 49.7
    # The default shape: the evening peak hour sees several times the night trough's demand.
    assert counts[17] > 5 * counts[3]


def test_flat_profile_is_flat() -> None:
    """All weights equal: bookings_per_hour in every hour, whatever the clock says."""
    settings = SimulatorSettings(seed=2, vehicles=0, bookings_per_hour=120.0,
                                 duration_s=4 * 3600.0, speed="max", network="straight",
                                 demand_profile=[1.0] * 24)
    assert len(bookings_of(settings, datetime(2024, 5, 6, 3, 0, tzinfo=CET))) == 480


def test_hot_spots_hold_the_demand_without_background() -> None:
    """With no background share, every pickup and dropoff lies in a configured hot spot."""
    spots = [HotSpot(lat=48.86, lon=2.35, radius_m=500, weight=1),
             HotSpot(lat=48.84, lon=2.30, radius_m=300, weight=4)]
    settings = SimulatorSettings(seed=4, vehicles=0, bookings_per_hour=300.0,
                                 duration_s=3600.0, speed="max", network="straight",
                                 area=Circle(lat=48.8566, lon=2.3522, radius_m=5000),
                                 demand_hot_spots=spots, demand_background_share=0.0,
                                 min_trip_m=0.0)
    near = [0, 0]
    for booking in bookings_of(settings, datetime(2024, 5, 6, 8, 0, tzinfo=CET)):
        for lat, lon in ((booking["pickup_lat"], booking["pickup_lon"]),
                         (booking["dropoff_lat"], booking["dropoff_lon"])):
            inside = [math.hypot((lat - s.lat) * 111_195.0,
                                 (lon - s.lon) * 111_195.0 * math.cos(math.radians(s.lat)))
                      <= s.radius_m + 0.01 for s in spots]
            assert any(inside)
            near[inside.index(True)] += 1
    # Weights 1 and 4: about a fifth of the points in the first spot.
    assert 0.12 < near[0] / sum(near) < 0.28


def test_default_hot_spots_are_seeded() -> None:
    """The default hot spots come from the seed: same seed, same demand; not uniform."""
    settings = SimulatorSettings(seed=5, vehicles=0, bookings_per_hour=200.0,
                                 duration_s=1800.0, speed="max", network="straight")
    start = datetime(2024, 5, 6, 8, 0, tzinfo=CET)
    assert bookings_of(settings, start) == bookings_of(settings, start)
    other = bookings_of(settings.model_copy(update={"seed": 6}), start)
    assert other != bookings_of(settings, start)


weights = st.floats(allow_nan=True, allow_infinity=True, width=32)


@given(st.lists(weights, min_size=0, max_size=30))
def test_profile_validation(profile: list[float]) -> None:
    """demand_profile: exactly 24 finite weights in [0, 1e6], not all zero; else a 400."""
    valid = (len(profile) == 24 and all(0 <= w <= 1e6 for w in profile)
             and sum(profile) > 0)
    if valid:
        assert read_settings({"simulator": {"demand_profile": profile}}).demand_profile == profile
    else:
        with pytest.raises(BadRequest) as info:
            read_settings({"simulator": {"demand_profile": profile}})
        assert info.value.code == "invalid_simulation_data"


@given(st.fixed_dictionaries({"lat": weights, "lon": weights, "radius_m": weights,
                              "weight": weights}))
def test_hot_spot_validation(spot: dict[str, float]) -> None:
    """A hot spot needs a real position, a radius in (0, 100 km] and a weight > 0."""
    valid = (-85 <= spot["lat"] <= 85 and -180 <= spot["lon"] <= 180
             and 0 < spot["radius_m"] <= 100_000 and 0 < spot["weight"] <= 1e6)
    data = {"simulator": {"demand_hot_spots": [spot]}}
    if valid:
        assert read_settings(data).demand_hot_spots is not None
    else:
        with pytest.raises(BadRequest):
            read_settings(data)


def test_default_profile_has_peaks_and_a_trough() -> None:
    profile = DEFAULT_DEMAND_PROFILE
    assert len(profile) == 24
    assert max(profile[6:10]) > 1.5 and max(profile[15:19]) > 1.5
    assert max(profile[1:5]) < 0.25
