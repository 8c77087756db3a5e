"""Re-optimisation: bookings not yet picked up move to where they now fit best.

Every ``reoptimise_interval_s`` the engine takes the bookings assigned and not yet picked up
(at most ``reoptimise_max_bookings`` a round, in turn, so a large fleet pays a bounded price)
and, one at a time, takes each off its route and asks the scheduler for its cheapest
insertion over the fleet. The booking moves only when that insertion is cheaper (by the
scheduler's own cost: added route time plus half the wait) than where it was, and it never
breaks a promise:

- the scheduler's insertion keeps the booking's pickup window and ride limit, and every
  other booking's on the routes it touches (their slack);
- a vehicle's next stop is committed: a booking whose pickup is a vehicle's next stop is not
  taken off, and an insertion before another vehicle's next stop is refused;
- the booking is on one route at a time: it leaves the old route as it joins the new one,
  and both routes are published (``assignment``, ``vehicle_state_changed``) as any new route.

Pure: it acts on the world's state; the same seed gives the same moves.
"""

from __future__ import annotations

from .model import Booking, BookingStatus, NodeType
from .scheduler import WAIT_WEIGHT
from .world import World

#: A move must save at least this much of the scheduler's cost (seconds): ties and rounding
#: never move a booking back and forth.
MIN_GAIN_S = 1.0


def candidates(world: World) -> list[int]:
    """Ids of the bookings that may move: assigned, not picked up, pickup not a next stop."""
    ids = []
    for vehicle in world.vehicles.values():
        for node in vehicle.route[1:]:
            if node.node_type is NodeType.PICKUP:
                ids.append(node.booking_id)
    ids.sort()
    return ids


def reinsert(world: World, booking: Booking) -> bool:
    """Move ``booking`` to its cheapest insertion if that saves; True when it moved."""
    assert booking.vehicle_id is not None and booking.pickup_node is not None
    vehicle = world.vehicles[booking.vehicle_id]
    route = vehicle.route
    if not route or route[0] is booking.pickup_node:
        return False
    now = world.now
    scheduler = world.scheduler
    with_plan = scheduler.plan(vehicle, world.bookings)
    k = route.index(booking.pickup_node)
    without = [n for n in route if n.booking_id != booking.id]
    # The old place's cost as the scheduler counts an insertion's: the time it adds to the
    # route plus the weighted wait.
    vehicle.route = without
    vehicle.version += 1
    world._tell(vehicle)
    without_plan = scheduler.plan(vehicle, world.bookings)
    old_cost = (with_plan.dep[-1] - without_plan.dep[-1]
                + WAIT_WEIGHT * (with_plan.arr[k] - now))
    ins = scheduler.best_insertion(booking, world.vehicles.values(), world.bookings, now)
    if (ins is None or ins.cost > old_cost - MIN_GAIN_S
            or (ins.i == 0 and world.vehicles[ins.vehicle_id].route)):
        vehicle.route = route
        world.rearm(vehicle)  # the same route and times: nothing to publish
        return False
    world.reanchor(vehicle)  # its next stop is unchanged, so is where it is heading
    booking.vehicle_id = None
    if ins.vehicle_id != vehicle.id:
        world.route_changed(vehicle)
    world.insert(booking, ins)
    return True


def reoptimise(world: World, cursor: int, limit: int) -> tuple[int, int]:
    """One round over at most ``limit`` bookings, starting after booking id ``cursor``;
    returns (the new cursor, how many moved)."""
    ids = candidates(world)
    if not ids:
        return 0, 0
    start = next((n for n, bid in enumerate(ids) if bid > cursor), 0)
    chosen = (ids[start:] + ids[:start])[:limit]
    moved = 0
    for bid in chosen:
        booking = world.bookings[bid]
        if booking.status is BookingStatus.ASSIGNED and booking.vehicle_id is not None:
            moved += reinsert(world, booking)
    return chosen[-1], moved
