"""Lower bounds of insertion costs over the whole fleet, as array arithmetic.

The scheduler tries its candidate vehicles cheapest bound first and stops as soon as the
next bound is above the best cost found (branch and bound): the answer is the same as
trying every candidate, because no insertion into a vehicle costs less than its bound.

A vehicle's rows (see ``Scheduler._entries``) are the places where it could turn towards a
new pickup: row 0 is where it is (its anchor), row k + 1 is after its stop k. Putting the
pickup after row r and before the stop of row r + 1 costs (``scheduler.Scheduler``'s cost:
the delay pushed into the route, plus ``wait_weight`` x the new rider's wait):

* after the last row (the route's end): exactly ``a + dwell + direct + dwell - end`` plus
  the wait, where ``a`` is the pickup time and ``end`` the time the route ends;
* before a stop: with the dropoff right after the pickup, exactly
  ``a + dwell + direct + dwell + t(dropoff, next) - arr(next)``; with the dropoff further
  down, at least the pickup's own delay ``a + dwell + t(pickup, next) - arr(next)`` plus a
  dwell (the route from the next stop to the dropoff's place and on to the stop after it is
  no shorter than the direct drive, by the triangle inequality of shortest paths).

``a`` is the row's earliest pickup time, a lower bound (exact except for a vehicle driving a
leg, whose row starts where it left); every cost grows with ``a``, so the bound holds. A stop
off the network's nodes gets 0 for its drive times (still a lower bound).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]

#: Columns of a fleet row.
NODE, TIME, CONNECTOR, SEATS, IDLE, ARRIVAL, ON_NODE = range(7)


def insertion_lower_bounds(
    rows: Array,
    offsets: NDArray[np.int64],
    pickup_at: Array,
    from_pickup: Array,
    from_dropoff: Array,
    *,
    now: float,
    direct_s: float,
    dwell_s: float,
    wait_weight: float,
) -> Array:
    """Per vehicle, a lower bound of the cost of any insertion (``inf``: none possible).

    ``pickup_at``: per row, the earliest time the vehicle can be at the pickup from there
    (``inf`` where no seat is free or it is too late). ``from_pickup`` and ``from_dropoff``:
    per network node, the drive from the pickup (from the dropoff) to it, ``inf`` beyond
    what was searched.
    """
    count = len(rows)
    nxt = np.minimum(np.arange(1, count + 1), count - 1)
    last = np.zeros(count, dtype=bool)
    last[offsets[1:] - 1] = True
    last[-1] = True
    first = np.zeros(count, dtype=bool)
    first[offsets] = True
    node_next = rows[nxt, NODE].astype(np.int64)
    on_node = rows[nxt, ON_NODE] > 0
    fp = np.where(on_node, from_pickup[node_next], 0.0)
    fd = np.where(on_node, from_dropoff[node_next], 0.0)
    arr_next = rows[nxt, ARRIVAL]
    a = pickup_at
    with np.errstate(invalid="ignore"):  # inf - inf where nothing is possible anyway
        together = a + 2.0 * dwell_s + direct_s + fd - arr_next
        apart = a + 2.0 * dwell_s + fp - arr_next
        middle = np.minimum(together, apart)
        times = rows[:, TIME]
        end = np.where(first, np.maximum(times, now), times)
        at_end = a + 2.0 * dwell_s + direct_s - end
        bound = np.where(last, at_end, middle) + wait_weight * (a - now)
    bound[~np.isfinite(a)] = np.inf
    bound[np.isnan(bound)] = np.inf
    out: Array = np.minimum.reduceat(bound, offsets)
    return out
