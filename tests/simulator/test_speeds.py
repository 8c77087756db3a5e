"""``gps_data.speed`` is the vehicle's speed on the street it is on, 0 when it stands."""

from __future__ import annotations

import itertools
import math
import statistics
from datetime import UTC, datetime

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.network import NetworkTravel
from ridecast.simulator.core.settings import Circle

START = datetime(2024, 5, 6, 8, 0, tzinfo=UTC)


def _metres(a: tuple[float, float], b: tuple[float, float]) -> float:
    kx = 111_195.0 * math.cos(math.radians((a[0] + b[0]) / 2))
    return math.hypot((a[0] - b[0]) * 111_195.0, (a[1] - b[1]) * kx)


def test_reported_speed_matches_displacement_between_fixes() -> None:
    settings = SimulatorSettings(seed=5, vehicles=8, bookings_per_hour=120, duration_s=1200,
                                 speed="max", gps_noise_m=0.0, gps_interval_s=5.0,
                                 area=Circle(lat=57.705, lon=11.963, radius_m=3000))
    engine = Engine(1, settings, START)
    assert isinstance(engine.travel, NetworkTravel)
    top = engine.travel.speed_mps
    fixes: dict[int, list[tuple[float, tuple[float, float], float]]] = {}
    while not engine.finished:
        for event in engine.advance(engine.now + 60.0):
            data = event["data"]
            if data.get("vehicle_event") == "gps_data":
                t = datetime.fromisoformat(data["device_ts"]).timestamp()
                fixes.setdefault(data["vehicle_id"], []).append(
                    (t, (data["lat"], data["lon"]), data["speed"]))
    ratios: list[float] = []
    speeds: list[float] = []
    for track in fixes.values():
        for (t0, p0, v0), (t1, p1, v1) in itertools.pairwise(track):
            speeds.append(v1)
            moved = _metres(p0, p1)
            if t1 - t0 != settings.gps_interval_s or v0 <= 0 or v1 <= 0:
                continue
            # A straight line between fixes is at most the distance driven on the street.
            ratios.append(moved / (t1 - t0) / ((v0 + v1) / 2))
    assert len(ratios) > 200
    # Not the network's top speed on every row: speeds vary with the street.
    assert sum(v == round(top, 2) for v in speeds) < 0.2 * len(speeds)
    assert len(set(speeds)) > 20
    # Measured against displacement: the median fix-to-fix speed is the reported one, give
    # or take the corners cut by a straight line and the change of street between fixes.
    assert 0.7 < statistics.median(ratios) < 1.15
    assert max(speeds) <= top + 0.01
