"""Simulator settings read from a simulation's data."""

from __future__ import annotations

import pytest

from ridecast.errors import BadRequest
from ridecast.simulator.core.settings import BBox, Circle, read_settings


def test_defaults() -> None:
    """No data at all gives the demo defaults, tracker on."""
    settings = read_settings({})
    assert settings.vehicles == 12 and settings.performance_tracker_enabled
    assert isinstance(settings.area, Circle)


def test_tracker_from_data() -> None:
    """data.performance_tracker_enabled is where the interface names it."""
    assert not read_settings({"performance_tracker_enabled": False}).performance_tracker_enabled


def test_bbox_and_speed_max() -> None:
    """An area may be a bounding box; speed may be 'max'."""
    settings = read_settings({"simulator": {
        "area": {"min_lat": 1, "min_lon": 2, "max_lat": 1.1, "max_lon": 2.1}, "speed": "max"}})
    assert isinstance(settings.area, BBox) and settings.realtime_factor is None


@pytest.mark.parametrize("bad", [
    {"simulator": {"vehicles": -1}},
    {"simulator": {"speed": "fast"}},
    {"simulator": {"speed": 0}},
    {"simulator": {"unknown": 1}},
    {"simulator": {"area": {"min_lat": 2, "min_lon": 2, "max_lat": 1, "max_lon": 3}}},
    {"simulator": []},
    {"simulator": {"start_ts": "2024-01-01T00:00:00"}},
])
def test_bad_settings_are_400(bad: dict[str, object]) -> None:
    """A bad value is a 400 invalid_simulation_data naming where it is."""
    with pytest.raises(BadRequest) as info:
        read_settings(bad)
    assert info.value.code == "invalid_simulation_data"
