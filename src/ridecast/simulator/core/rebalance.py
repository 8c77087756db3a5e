"""Where idle vehicles should wait: towards the demand the run has seen, not the generator's.

Every ``rebalance_interval_s`` the engine looks at the requests of the last
``rebalance_window_s`` (their pickup points, a request that went unserved for want of a
vehicle counting ``rebalance_unserved_weight`` times) on a grid of ``rebalance_cell_m``
cells, shares the idle fleet among the cells in proportion to that weight (largest
remainders, so one idle vehicle goes to the busiest cell and any number of vehicles is
shared out), and sends vehicles from cells with more than their share, or none, to the
cells short of theirs, nearest first. A cell's goal is its latest request's pickup point
(on the network already). Pure: it reads bookings and vehicles and returns the moves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .model import Booking, BookingStatus, Vehicle
from .polyline import LatLon
from .settings import SimulatorSettings

Cell = tuple[int, int]


def _cell(p: LatLon, origin: LatLon, size_m: float) -> Cell:
    kx = 111_195.0 * math.cos(math.radians(origin[0]))
    return (math.floor((p[0] - origin[0]) * 111_195.0 / size_m),
            math.floor((p[1] - origin[1]) * kx / size_m))


def unserved(booking: Booking) -> bool:
    """The request found no vehicle (no offer, or none left when the rider accepted)."""
    return (booking.status is BookingStatus.NO_OFFER
            or booking.cancel_reason == "no_vehicle")


def demand_cells(bookings: dict[int, Booking], now: float, settings: SimulatorSettings,
                 origin: LatLon) -> dict[Cell, tuple[float, LatLon]]:
    """Weight and goal point of each cell with a request in the window."""
    since = now - settings.rebalance_window_s
    cells: dict[Cell, tuple[float, LatLon]] = {}
    # Bookings are kept in request order: walk back from the newest.
    for booking in reversed(bookings.values()):
        if booking.requested_t < since:
            break
        key = _cell(booking.pickup, origin, settings.rebalance_cell_m)
        weight = settings.rebalance_unserved_weight if unserved(booking) else 1.0
        old = cells.get(key)
        cells[key] = (weight, booking.pickup) if old is None else (old[0] + weight, old[1])
    return cells


def plan_moves(bookings: dict[int, Booking], idle: Iterable[Vehicle], now: float,
               settings: SimulatorSettings, origin: LatLon) -> list[tuple[Vehicle, LatLon]]:
    """The (vehicle, goal) moves of one rebalancing round; see the module docstring."""
    vehicles = sorted(idle, key=lambda v: v.id)
    cells = demand_cells(bookings, now, settings, origin)
    total = sum(w for w, _ in cells.values())
    if not vehicles or total <= 0:
        return []
    n = len(vehicles)
    keys = sorted(cells)
    quotas = {k: n * cells[k][0] / total for k in keys}
    want = {k: math.floor(q) for k, q in quotas.items()}
    left = n - sum(want.values())
    for k in sorted(keys, key=lambda k: (-(quotas[k] - want[k]), -cells[k][0], k))[:left]:
        want[k] += 1
    size = settings.rebalance_cell_m
    here: dict[Cell, list[Vehicle]] = {}
    for v in vehicles:
        here.setdefault(_cell(v.target if v.target is not None else v.anchor, origin, size),
                        []).append(v)
    free: list[Vehicle] = []
    for key, group in here.items():
        surplus = len(group) - want.get(key, 0)
        if surplus > 0:
            # Those already driving somewhere stay on their way.
            free.extend([v for v in group if v.target is None][-surplus:])
    deficits = sorted(((want[k] - len(here.get(k, ())), cells[k][0], k) for k in keys),
                      key=lambda item: (-item[0], -item[1], item[2]))
    moves: list[tuple[Vehicle, LatLon]] = []
    for deficit, _, key in deficits:
        goal = cells[key][1]
        kx = math.cos(math.radians(goal[0]))
        for _ in range(deficit):
            if not free:
                return moves
            best = min(free, key=lambda v: (math.hypot(v.anchor[0] - goal[0],
                                                       (v.anchor[1] - goal[1]) * kx), v.id))
            free.remove(best)
            if best.anchor != goal:
                moves.append((best, goal))
    return moves
