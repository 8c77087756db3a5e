"""Insertion heuristic for dial-a-ride: where does a new booking fit best?

For a new booking, every vehicle near enough to reach the pickup in time is tried, nearest
first (at most ``max_candidates``); in each, every position of the pickup and every later
position of the dropoff. An insertion is feasible when the seats are never exceeded, the
pickup comes before the dropoff, and every passenger on board or assigned (the new one too)
keeps their latest pickup time and their longest ride time. The cheapest feasible insertion
wins; none feasible means ``no_offer``.

Speed comes from a per-vehicle ``Plan`` (arrival times, loads, and the *slack* of each node:
how much delay may be pushed into the route at that node without breaking a constraint
downstream), cached until the vehicle's route changes. With it each (pickup, dropoff) pair
is checked in O(1) instead of by re-simulating the route. The slack test is conservative in
one case (a dropoff after the new dropoff whose pickup lies between the two new nodes is
counted as delayed by both insertions): it may skip a barely-feasible insertion, never
accept an infeasible one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import Booking, NodeType, RouteNode, Vehicle
from .polyline import LatLon
from .travel import TravelModel

INF = math.inf
WAIT_WEIGHT = 0.5
"""Cost of one second of the new rider's wait, next to one second of added vehicle time."""


@dataclass(slots=True)
class Plan:
    """A vehicle's route with its planned times; valid while ``version`` is current."""

    version: int
    start: LatLon
    start_t: float
    arr: list[float]
    dep: list[float]
    load0: int
    load_after: list[int]
    slack: list[float]  # len(route) + 1; slack[len] = inf
    margin: float  # the tightest constraint's room, in seconds (< 0: one is broken)

    @property
    def end_t(self) -> float:
        return self.dep[-1] if self.dep else self.start_t

    def feasible(self, capacity: int) -> bool:
        """No seat or time constraint is broken (a 1 ms tolerance absorbs float noise)."""
        if self.load0 > capacity or any(load > capacity for load in self.load_after):
            return False
        return self.margin >= -1e-3


@dataclass(slots=True, frozen=True)
class Insertion:
    """Put the pickup before ``route[i]`` and the dropoff before ``route[j]`` (j >= i)."""

    vehicle_id: int
    i: int
    j: int
    cost: float
    pickup_t: float


def build_plan(
    vehicle: Vehicle,
    route: list[RouteNode],
    bookings: Mapping[int, Booking],
    travel: TravelModel,
    dwell_s: float,
    passengers: Mapping[int, int] | None = None,
) -> Plan:
    """Times, loads and slack of ``route`` driven from the vehicle's anchor.

    ``passengers`` overrides booking passenger counts (to test a demand change).
    """
    pax = passengers or {}
    n = len(route)
    arr = [0.0] * n
    dep = [0.0] * n
    load_after = [0] * n
    pos, t = vehicle.anchor, vehicle.anchor_t
    load = sum(pax.get(b, c) for b, c in vehicle.onboard.items())
    load0 = load
    pickup_index: dict[int, int] = {}
    for k, node in enumerate(route):
        t += travel.duration_s(pos, node.pos)
        arr[k] = t
        t += dwell_s
        dep[k] = t
        pos = node.pos
        count = pax.get(node.booking_id, bookings[node.booking_id].passengers)
        if node.node_type is NodeType.PICKUP:
            load += count
            pickup_index[node.booking_id] = k
        else:
            load -= count
        load_after[k] = load
    # limit[k]: how late node k may become; reach[k]: index of the pickup a dropoff depends
    # on (-1 when the passenger is on board), so it only binds delays pushed in before it.
    limits: list[tuple[float, int]] = []
    for k, node in enumerate(route):
        booking = bookings[node.booking_id]
        if node.node_type is NodeType.PICKUP:
            limits.append((booking.latest_pickup_t - arr[k], -1))
        else:
            p = pickup_index.get(node.booking_id, -1)
            picked = booking.picked_up_t if p < 0 else dep[p]
            limits.append(((picked or 0.0) + booking.max_ride_s - arr[k], p))
    slack = [INF] * (n + 1)
    for k in range(n):
        best = INF
        for j in range(k, n):
            limit, p = limits[j]
            if p < k and limit < best:
                best = limit
        slack[k] = best
    margin = min((limit for limit, _ in limits), default=INF)
    return Plan(vehicle.version, vehicle.anchor, vehicle.anchor_t, arr, dep, load0, load_after,
                slack, margin)


class Scheduler:
    """Finds the cheapest feasible insertion; caches each vehicle's plan by route version."""

    def __init__(self, travel: TravelModel, dwell_s: float, max_candidates: int) -> None:
        self.travel = travel
        self.dwell_s = dwell_s
        self.max_candidates = max_candidates
        self._plans: dict[int, Plan] = {}

    def plan(self, vehicle: Vehicle, bookings: Mapping[int, Booking]) -> Plan:
        """The vehicle's current plan (cached until its version changes)."""
        cached = self._plans.get(vehicle.id)
        if cached is None or cached.version != vehicle.version:
            cached = build_plan(vehicle, vehicle.route, bookings, self.travel, self.dwell_s)
            self._plans[vehicle.id] = cached
        return cached

    def start_of(self, vehicle: Vehicle, plan: Plan, now: float) -> tuple[LatLon, float]:
        """Where and when a vehicle can begin a detour: now, or after its current stop."""
        if not vehicle.route or now <= vehicle.anchor_t:
            return vehicle.anchor, max(now, vehicle.anchor_t)
        pos, _ = self.travel.position(vehicle.anchor, vehicle.route[0].pos,
                                      now - vehicle.anchor_t)
        return pos, now

    def best_insertion(
        self,
        booking: Booking,
        vehicles: Iterable[Vehicle],
        bookings: Mapping[int, Booking],
        now: float,
        prefer: int | None = None,
    ) -> Insertion | None:
        """The cheapest feasible insertion of ``booking`` over ``vehicles``, or None.

        ``prefer`` names a vehicle whose feasible insertion wins over cheaper ones elsewhere
        (the vehicle a rider was offered).
        """
        p = booking.pickup
        self.travel.prepare((p, booking.dropoff),
                            booking.latest_pickup_t - now + booking.max_ride_s)
        cos_lat = math.cos(math.radians(p[0]))
        reach_deg = (booking.latest_pickup_t - now) * self.travel.speed_mps / 111_195.0
        reach2 = (reach_deg * 1.01) ** 2
        scored: list[tuple[float, int, Vehicle, Plan, LatLon, float]] = []
        for vehicle in vehicles:
            if not vehicle.enabled:
                continue
            plan = self.plan(vehicle, bookings)
            start, start_t = self.start_of(vehicle, plan, now)
            dy = start[0] - p[0]
            dx = (start[1] - p[1]) * cos_lat
            d2 = dx * dx + dy * dy
            # Any route reaches the pickup no sooner than straight from the start point.
            slack_deg = (booking.latest_pickup_t - start_t) * self.travel.speed_mps / 111_195.0
            if slack_deg < 0 or d2 > reach2 or d2 > (slack_deg * 1.01) ** 2:
                continue
            key = d2
            for node in vehicle.route:
                ny = node.pos[0] - p[0]
                nx = (node.pos[1] - p[1]) * cos_lat
                key = min(key, nx * nx + ny * ny)
            scored.append((key, vehicle.id, vehicle, plan, start, start_t))
        scored.sort(key=lambda item: (item[0], item[1]))
        best: Insertion | None = None
        for _, _, vehicle, plan, start, start_t in scored[: self.max_candidates]:
            found = self._best_in_vehicle(booking, vehicle, plan, start, start_t, now)
            if found is None:
                continue
            if prefer is not None and found.vehicle_id == prefer:
                return found
            if best is None or (found.cost, found.vehicle_id) < (best.cost, best.vehicle_id):
                best = found
        return best

    def _best_in_vehicle(
        self,
        booking: Booking,
        vehicle: Vehicle,
        plan: Plan,
        start: LatLon,
        start_t: float,
        now: float,
    ) -> Insertion | None:
        route = vehicle.route
        n = len(route)
        dur = self.travel.duration_s
        dw = self.dwell_s
        p, d = booking.pickup, booking.dropoff
        pax, cap = booking.passengers, vehicle.capacity
        latest, max_ride, direct = booking.latest_pickup_t, booking.max_ride_s, booking.direct_s
        arr, dep, slack, load_after = plan.arr, plan.dep, plan.slack, plan.load_after
        from_p = [dur(p, node.pos) for node in route]
        from_d = [dur(d, node.pos) for node in route]
        to_d = [dur(node.pos, d) for node in route]
        best: Insertion | None = None
        for i in range(n + 1):
            if i == 0:
                prev_pos, prev_dep, load_prev = start, start_t, plan.load0
            else:
                prev_pos, prev_dep, load_prev = route[i - 1].pos, dep[i - 1], load_after[i - 1]
            if load_prev + pax > cap:
                continue
            a_p = prev_dep + dur(prev_pos, p)
            if a_p > latest:
                continue
            d_p = a_p + dw
            wait_cost = WAIT_WEIGHT * (a_p - now)
            # Dropoff right after the pickup.
            a_d = d_p + direct
            if i < n:
                delta = a_d + dw + from_d[i] - arr[i]
                feasible = delta <= slack[i]
            else:
                delta = a_d + dw - (dep[n - 1] if n else start_t)
                feasible = True
            if feasible and (best is None or delta + wait_cost < best.cost):
                best = Insertion(vehicle.id, i, i, delta + wait_cost, a_p)
            if i == n:
                continue
            # Dropoff further down: the pickup's own delay must fit first.
            dp = d_p + from_p[i] - arr[i]
            if dp > slack[i]:
                continue
            for j in range(i + 1, n + 1):
                if load_after[j - 1] + pax > cap:
                    break
                a_d = dep[j - 1] + dp + to_d[j - 1]
                if a_d - d_p > max_ride:
                    continue
                if j < n:
                    total = a_d + dw + from_d[j] - arr[j]
                    if total > slack[j]:
                        continue
                else:
                    total = a_d + dw - dep[n - 1]
                cost = total + wait_cost
                if best is None or cost < best.cost:
                    best = Insertion(vehicle.id, i, j, cost, a_p)
        return best


def apply_insertion(route: list[RouteNode], ins: Insertion, pickup: RouteNode,
                    dropoff: RouteNode) -> list[RouteNode]:
    """The route with the booking's two nodes put where ``ins`` says."""
    return [*route[:ins.i], pickup, *route[ins.i:ins.j], dropoff, *route[ins.j:]]
