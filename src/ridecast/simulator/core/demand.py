"""Where and when riders ask for trips: a time-of-day profile and spatial hot spots.

``arrival_times`` turns ``bookings_per_hour`` (the mean rate over a day) and the 24-value
``demand_profile`` (relative weights per hour of the simulated clock's day) into the request
times of a run: the count is the integral of the rate over the run (rounded), and the times are
drawn from the piecewise-constant rate by inverting its cumulative integral, so each hour gets
its share of the requests. ``Zones`` draws request points: with probability
``demand_background_share`` uniformly in the service area, else in one of the hot spots
(picked by weight, uniform in its disc). Hot spots are configured or, by default, placed in
the area from the seed. Everything draws from seeded streams only.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from datetime import datetime

from .polyline import LatLon
from .settings import BBox, Circle, HotSpot, SimulatorSettings

#: Default hot spots placed from the seed: this many, with these weights.
DEFAULT_SPOT_WEIGHTS = (3.0, 2.0, 1.0)
#: Default hot spot radius, as a share of the service area's radius (or half-diagonal).
DEFAULT_SPOT_RADIUS_SHARE = 0.15


def hourly_rates(settings: SimulatorSettings) -> list[float]:
    """Requests per hour in each hour of the day (their mean is ``bookings_per_hour``)."""
    profile = settings.demand_profile
    mean = sum(profile) / len(profile)
    return [settings.bookings_per_hour * w / mean for w in profile]


def arrival_times(settings: SimulatorSettings, start: datetime,
                  rng: random.Random) -> list[float]:
    """Sorted request times (seconds since ``start``) over ``[0, duration_s)``."""
    duration = settings.duration_s
    profile = settings.demand_profile
    if min(profile) == max(profile):
        # Flat: a homogeneous Poisson process given its count is sorted uniform draws.
        count = round(settings.bookings_per_hour * duration / 3600.0)
        return sorted(rng.uniform(0.0, duration) for _ in range(count))
    rates = hourly_rates(settings)
    # Pieces of constant rate, cut at the simulated clock's hour boundaries.
    offset = start.hour * 3600.0 + start.minute * 60.0 + start.second + start.microsecond / 1e6
    edges = [0.0]
    cum = [0.0]
    t = 0.0
    while t < duration:
        clock = offset + t
        hour = int(clock // 3600.0) % 24
        end = min(duration, t + (3600.0 - clock % 3600.0))
        cum.append(cum[-1] + rates[hour] * (end - t) / 3600.0)
        edges.append(end)
        t = end
    total = cum[-1]
    count = round(total)
    times: list[float] = []
    for _ in range(count):
        u = rng.uniform(0.0, total)
        k = max(1, bisect.bisect_right(cum, u))
        k = min(k, len(cum) - 1)
        span = cum[k] - cum[k - 1]
        f = (u - cum[k - 1]) / span if span > 0 else 0.0
        times.append(edges[k - 1] + f * (edges[k] - edges[k - 1]))
    times.sort()
    return times


def _area_scale_m(area: BBox | Circle) -> tuple[LatLon, float]:
    if isinstance(area, Circle):
        return (area.lat, area.lon), area.radius_m
    centre = ((area.min_lat + area.max_lat) / 2, (area.min_lon + area.max_lon) / 2)
    half_h = (area.max_lat - area.min_lat) * 111_195.0 / 2
    half_w = (area.max_lon - area.min_lon) * 111_195.0 * math.cos(math.radians(centre[0])) / 2
    return centre, math.hypot(half_h, half_w)


def disc_point(rng: random.Random, lat: float, lon: float, radius_m: float) -> LatLon:
    """A point uniform in a disc (two draws)."""
    r = radius_m * math.sqrt(rng.random())
    theta = rng.random() * 2.0 * math.pi
    dlat = r * math.cos(theta) / 111_195.0
    dlon = r * math.sin(theta) / (111_195.0 * math.cos(math.radians(lat)))
    return (lat + dlat, lon + dlon)


def area_point(rng: random.Random, area: BBox | Circle) -> LatLon:
    """A point uniform in the service area (two draws)."""
    if isinstance(area, BBox):
        return (rng.uniform(area.min_lat, area.max_lat), rng.uniform(area.min_lon, area.max_lon))
    return disc_point(rng, area.lat, area.lon, area.radius_m)


def default_spots(settings: SimulatorSettings, rng: random.Random) -> list[HotSpot]:
    """Hot spots placed in the area from the seed: inner half of the area, fixed weights."""
    (lat, lon), scale = _area_scale_m(settings.area)
    spots = []
    for weight in DEFAULT_SPOT_WEIGHTS:
        c = disc_point(rng, lat, lon, scale * 0.5)
        spots.append(HotSpot(lat=c[0], lon=c[1], radius_m=scale * DEFAULT_SPOT_RADIUS_SHARE,
                             weight=weight))
    return spots


class Zones:
    """Draws request points: background (uniform in the area) or a hot spot by weight."""

    def __init__(self, settings: SimulatorSettings, spots_rng: random.Random) -> None:
        self.area = settings.area
        self.background = settings.demand_background_share
        configured = settings.demand_hot_spots
        self.spots: list[HotSpot] = (default_spots(settings, spots_rng) if configured is None
                                     else list(configured))
        total = sum(s.weight for s in self.spots)
        acc = 0.0
        self._cum: list[float] = []
        for spot in self.spots:
            acc += spot.weight / total if total > 0 else 0.0
            self._cum.append(acc)

    def draw(self, rng: random.Random, snap: Callable[[LatLon], LatLon]) -> LatLon:
        """A request point (always four draws, so the stream stays aligned)."""
        u, v = rng.random(), rng.random()
        if not self.spots or self._cum[-1] <= 0 or u < self.background:
            return snap(area_point(rng, self.area))
        k = min(bisect.bisect_left(self._cum, v), len(self.spots) - 1)
        spot = self.spots[k]
        return snap(disc_point(rng, spot.lat, spot.lon, spot.radius_m))
