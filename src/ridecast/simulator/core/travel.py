"""How vehicles move: the one replaceable piece between the simulator and geography.

``TravelModel`` is what the scheduler and the engine ask: how long from A to B, how far, along
which points, and where is a vehicle that left A for B some seconds ago. ``StraightLineTravel``
answers with great-circle distances at a constant speed and straight legs; a road network
(OSRM, a contracted graph) replaces it by implementing the same methods.
"""

from __future__ import annotations

import math
from typing import Protocol

from .polyline import LatLon

EARTH_RADIUS_M = 6_371_008.8


def haversine_m(a: LatLon, b: LatLon) -> float:
    """Great-circle distance in metres."""
    lat1, lon1 = a
    lat2, lon2 = b
    p1 = math.radians(lat1)
    p2 = math.radians(lat2)
    dp = p2 - p1
    dl = math.radians(lon2 - lon1)
    h = math.sin(dp * 0.5) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl * 0.5) ** 2
    return 2.0 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def bearing_deg(a: LatLon, b: LatLon) -> float:
    """Initial bearing from a to b, degrees clockwise from north in [0, 360)."""
    p1 = math.radians(a[0])
    p2 = math.radians(b[0])
    dl = math.radians(b[1] - a[1])
    y = math.sin(dl) * math.cos(p2)
    x = math.cos(p1) * math.sin(p2) - math.sin(p1) * math.cos(p2) * math.cos(dl)
    return (math.degrees(math.atan2(y, x)) + 360.0) % 360.0


class TravelModel(Protocol):
    """Travel times, distances and geometry between two points."""

    speed_mps: float

    def duration_s(self, a: LatLon, b: LatLon) -> float:
        """Driving time from a to b."""
        ...

    def distance_m(self, a: LatLon, b: LatLon) -> float:
        """Driving distance from a to b."""
        ...

    def path(self, a: LatLon, b: LatLon) -> list[LatLon]:
        """The points a vehicle passes from a to b, a and b included."""
        ...

    def position(self, a: LatLon, b: LatLon, elapsed_s: float, *,
                 keep: bool = False) -> tuple[LatLon, float]:
        """Where a vehicle that left a for b ``elapsed_s`` ago is, and its bearing.

        ``keep``: the point becomes the vehicle's anchor (later legs start there).
        """
        ...

    def snap(self, p: LatLon) -> LatLon:
        """The point where a trip or a vehicle at p starts (on the network, if any)."""
        ...

    def reach(self, target: LatLon, limit_s: float, *, forward: bool = False) -> Reach:
        """Times to ``target`` from anywhere (``forward``: from ``target`` to anywhere).

        Exact up to ``limit_s``; a time beyond it may come back as ``math.inf``. The scheduler
        asks for one per booking (bounded by what could still be feasible) instead of one
        search per vehicle.
        """
        ...


class Reach(Protocol):
    """One-to-many travel times around one point; see ``TravelModel.reach``."""

    def time(self, a: LatLon) -> float:
        """Time from a to the point (or from the point to a, for a forward reach)."""
        ...


class StraightReach:
    """``Reach`` of the straight-line model: exact everywhere, never infinite."""

    def __init__(self, travel: StraightLineTravel, target: LatLon) -> None:
        self.travel = travel
        self.target = target

    def time(self, a: LatLon) -> float:
        return self.travel.duration_s(a, self.target)


class StraightLineTravel:
    """Straight legs at a constant speed: distance is great-circle, position is linear.

    Linear interpolation in lat/lon keeps every position exactly on the straight segment that
    the encoded path draws, so GPS points can be checked against it.
    """

    def __init__(self, speed_kmh: float) -> None:
        self.speed_mps = speed_kmh / 3.6
        self._inv_speed = 1.0 / self.speed_mps

    def duration_s(self, a: LatLon, b: LatLon) -> float:
        return haversine_m(a, b) * self._inv_speed

    def distance_m(self, a: LatLon, b: LatLon) -> float:
        return haversine_m(a, b)

    def path(self, a: LatLon, b: LatLon) -> list[LatLon]:
        return [a, b]

    def snap(self, p: LatLon) -> LatLon:
        return p

    def reach(self, target: LatLon, limit_s: float, *, forward: bool = False) -> StraightReach:
        return StraightReach(self, target)  # symmetric: forward or not, the same times

    def position(self, a: LatLon, b: LatLon, elapsed_s: float, *,
                 keep: bool = False) -> tuple[LatLon, float]:
        total = self.duration_s(a, b)
        heading = bearing_deg(a, b) if a != b else 0.0
        if total <= 0.0 or elapsed_s >= total:
            return b, heading
        f = max(0.0, elapsed_s / total)
        return (a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f), heading
