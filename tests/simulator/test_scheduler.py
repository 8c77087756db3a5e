"""The insertion heuristic: what it returns is feasible; when nothing is, it says so."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ridecast.simulator.core.model import Booking, BookingStatus, NodeType, RouteNode, Vehicle
from ridecast.simulator.core.scheduler import Insertion, Scheduler, apply_insertion, build_plan
from ridecast.simulator.core.travel import StraightLineTravel

TRAVEL = StraightLineTravel(30.0)
DWELL = 20.0
point = st.tuples(st.floats(52.45, 52.55), st.floats(13.30, 13.50))


class World:
    """A fleet built by inserting bookings one by one with the scheduler itself."""

    def __init__(self, vehicles: list[tuple[float, float]], capacity: int) -> None:
        self.vehicles = [Vehicle(i + 1, f"v{i}", capacity, pos) for i, pos in enumerate(vehicles)]
        self.bookings: dict[int, Booking] = {}
        self.scheduler = Scheduler(TRAVEL, DWELL, max_candidates=100)

    def booking(self, pickup: tuple[float, float], dropoff: tuple[float, float], pax: int,
                wait: float, now: float) -> Booking:
        bid = len(self.bookings) + 1
        direct = TRAVEL.duration_s(pickup, dropoff)
        b = Booking(bid, f"b{bid}", "s", pickup, dropoff, pax, now, wait, direct, 0.0,
                    direct * 1.5 + DWELL, False)
        b.pickup_node = RouteNode(2 * bid, "p", bid, NodeType.PICKUP, pickup)
        b.dropoff_node = RouteNode(2 * bid + 1, "d", bid, NodeType.DROPOFF, dropoff)
        self.bookings[bid] = b
        return b

    def insert(self, b: Booking, ins: Insertion) -> list[RouteNode]:
        vehicle = self.vehicles[ins.vehicle_id - 1]
        assert b.pickup_node and b.dropoff_node
        return apply_insertion(vehicle.route, ins, b.pickup_node, b.dropoff_node)


def feasible(world: World, vehicle: Vehicle, route: list[RouteNode]) -> bool:
    return build_plan(vehicle, route, world.bookings, TRAVEL, DWELL).feasible(vehicle.capacity)


trip = st.tuples(point, point, st.integers(1, 3), st.floats(120, 1200))


@settings(max_examples=150, deadline=None)
@given(st.lists(point, min_size=1, max_size=4), st.integers(1, 4),
       st.lists(trip, min_size=1, max_size=10))
def test_every_insertion_is_feasible(vehicles: list[tuple[float, float]], capacity: int,
                                     trips: list[tuple[tuple[float, float], tuple[float, float],
                                                       int, float]]) -> None:
    """Seats, precedence, max wait and max ride hold for every passenger after each insertion;
    a booking gets None only when no insertion anywhere is feasible."""
    world = World(vehicles, capacity)
    for pickup, dropoff, pax, wait in trips:
        b = world.booking(pickup, dropoff, pax, wait, now=0.0)
        ins = world.scheduler.best_insertion(b, world.vehicles, world.bookings, 0.0)
        if ins is None:
            for vehicle in world.vehicles:
                n = len(vehicle.route)
                for i in range(n + 1):
                    for j in range(i, n + 1):
                        route = world.insert(b, Insertion(vehicle.id, i, j, 0.0, 0.0))
                        # the heuristic's slack test is conservative; brute force may find a
                        # barely-feasible one, but never with any real margin
                        plan = build_plan(vehicle, route, world.bookings, TRAVEL, DWELL)
                        assert not (plan.margin > 60.0 and all(
                            load <= capacity for load in plan.load_after)) or (
                            plan.arr[route.index(b.pickup_node)] > b.latest_pickup_t)
            b.status = BookingStatus.NO_OFFER
            continue
        vehicle = world.vehicles[ins.vehicle_id - 1]
        route = world.insert(b, ins)
        assert feasible(world, vehicle, route)
        assert route.index(b.pickup_node) < route.index(b.dropoff_node)  # type: ignore[arg-type]
        plan = build_plan(vehicle, route, world.bookings, TRAVEL, DWELL)
        assert abs(plan.arr[route.index(b.pickup_node)] - ins.pickup_t) < 1e-6  # type: ignore[arg-type]
        vehicle.route = route
        vehicle.version += 1


def test_no_vehicle_in_reach_gives_none() -> None:
    """A vehicle that cannot reach the pickup within max wait is not offered."""
    world = World([(52.50, 13.40)], 4)
    b = world.booking((52.50, 13.90), (52.51, 13.91), 1, 120.0, now=0.0)  # ~34 km away
    assert world.scheduler.best_insertion(b, world.vehicles, world.bookings, 0.0) is None


def test_too_many_passengers_gives_none() -> None:
    """A group larger than every vehicle gets no offer."""
    world = World([(52.50, 13.40)], 4)
    b = world.booking((52.50, 13.40), (52.51, 13.41), 5, 600.0, now=0.0)
    assert world.scheduler.best_insertion(b, world.vehicles, world.bookings, 0.0) is None


def test_pools_on_the_way() -> None:
    """A second rider going the same way shares the vehicle rather than a far idle one."""
    world = World([(52.50, 13.40), (52.40, 13.60)], 4)
    first = world.booking((52.50, 13.401), (52.50, 13.45), 1, 600.0, now=0.0)
    ins = world.scheduler.best_insertion(first, world.vehicles, world.bookings, 0.0)
    assert ins is not None and ins.vehicle_id == 1
    world.vehicles[0].route = world.insert(first, ins)
    world.vehicles[0].version += 1
    second = world.booking((52.50, 13.41), (52.50, 13.44), 1, 600.0, now=0.0)
    ins2 = world.scheduler.best_insertion(second, world.vehicles, world.bookings, 0.0)
    assert ins2 is not None and ins2.vehicle_id == 1
    assert [n.booking_id for n in world.insert(second, ins2)] == [1, 2, 2, 1]
