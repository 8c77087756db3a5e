"""Insertion heuristic for dial-a-ride: where does a new booking fit best?

For a new booking, one bounded backward search from the pickup (limit: the time left until
its latest pickup, from the earliest time a moving vehicle left its last stop) gives the
exact drive to the pickup from every node that can still make it; a vehicle is a candidate
when, from where it is (a lower bound while it drives a leg: from where it left, by the
triangle inequality) or after one of its stops with a seat free, it may be at the pickup in
time. The ``max_candidates`` with the earliest possible pickup are the candidates; in each,
every position of the pickup and every later position of the dropoff is tried, with times
from three more searches per booking (forward from the pickup and backward to the dropoff,
both bounded by the longest ride, and forward from the dropoff): no search per vehicle. On
a network they are tried in the order of a lower bound of their cost (``bounds``), and the
search stops at the first whose bound is above the best cost found: the same answer as
trying them all. An insertion is feasible when the seats are never exceeded, the
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
from itertools import compress
from operator import attrgetter, ne
from typing import cast

import numpy as np
from numpy.typing import NDArray

from .bounds import insertion_lower_bounds
from .model import Booking, NodeType, RouteNode, Vehicle
from .network import NetworkReach, NetworkTravel
from .polyline import LatLon
from .travel import Reach, TravelModel

INF = math.inf
_Entries = NDArray[np.float64]
#: The fleet's entries: rows, offset of each vehicle's rows, vehicles, their (id, version,
#: enabled) when the rows were built, and their ids.
_Fleet = tuple[_Entries, NDArray[np.int64], list[Vehicle], list[tuple[int, int, bool]],
               NDArray[np.int64]]
_DISABLED: _Entries = np.array([[0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0]])  # no seat: never a candidate
_KEY = attrgetter("id", "version", "enabled")
"""What the fleet's cached rows depend on, per vehicle."""
WAIT_WEIGHT = 0.5
"""Cost of one second of the new rider's wait, next to one second of added vehicle time."""
BOUND_SLACK_S = 1e-6
"""Taken off the network's cost bounds: float sums of shortest paths keep the triangle
inequality only to within rounding."""


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


#: A candidate: (lower bound of its cost, vehicle id, vehicle, plan).
_Candidate = tuple[float, int, Vehicle, Plan]


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
        #: Stop at the first candidate whose cost bound is above the best cost found (off:
        #: every candidate is tried; the answer is the same, tests compare the two).
        self.prune = True
        self._plans: dict[int, Plan] = {}
        self._entries_cache: dict[int, tuple[int, _Entries]] = {}
        self._stops_cache: dict[int, tuple[int, list[int] | None]] = {}
        self._fleet: _Fleet | None = None
        #: Ids of the vehicles whose version or ``enabled`` may have changed since the last
        #: decision, kept by the owner of the fleet (``World``), which never adds, removes
        #: or reorders vehicles once they are listed: ``_fleet_rows`` then refreshes those
        #: rows without comparing every vehicle's key. None: it compares them all.
        self.changed: set[int] | None = None
        self._index: dict[int, int] = {}

    def plan(self, vehicle: Vehicle, bookings: Mapping[int, Booking]) -> Plan:
        """The vehicle's current plan (cached until its version changes)."""
        cached = self._plans.get(vehicle.id)
        if cached is None or cached.version != vehicle.version:
            cached = build_plan(vehicle, vehicle.route, bookings, self.travel, self.dwell_s)
            self._plans[vehicle.id] = cached
        return cached

    def start_of(self, vehicle: Vehicle, plan: Plan, now: float) -> tuple[LatLon, float]:
        """Where and when a vehicle can begin a detour: now, or after its current stop."""
        heading_to = vehicle.heading_to
        if heading_to is None or now <= vehicle.anchor_t:
            return vehicle.anchor, max(now, vehicle.anchor_t)
        travel = self.travel
        if isinstance(travel, NetworkTravel):  # no bearing needed
            return travel.point(vehicle.anchor, heading_to, now - vehicle.anchor_t), now
        pos, _ = travel.position(vehicle.anchor, heading_to, now - vehicle.anchor_t)
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
        p, d = booking.pickup, booking.dropoff
        latest, pax = booking.latest_pickup_t, booking.passengers
        if latest < now:
            return None
        travel = self.travel
        floor = 2.0 * self.dwell_s - 1e-6
        if isinstance(travel, NetworkTravel):
            fleet_rows = self._fleet_rows(travel, vehicles, bookings)
            if fleet_rows is None:
                return None
            rows = fleet_rows[0]
            moving = rows[:, 1][(rows[:, 4] == 0) & (rows[:, 3] >= 0)]
            earliest_anchor = min(now, float(moving.min())) if len(moving) else now
            # One bounded backward search from the pickup: exact times from everywhere a
            # vehicle could still make it from (a moving one: from where it left).
            net_reach = travel.reach(p, latest - earliest_anchor)
            at, chosen = self._network_candidates(fleet_rows, net_reach, now, pax, latest)
            if not chosen:
                return None
            reaches: tuple[Reach, Reach, Reach, Reach] = (
                net_reach, travel.reach(p, booking.max_ride_s, forward=True),
                travel.reach(d, booking.max_ride_s), travel.reach(d, INF, forward=True))
            if prefer is not None:
                # The offered vehicle, if still a candidate, first: when it fits it wins, and
                # the others need no bounds.
                listed = fleet_rows[2]
                index = next((i for i in chosen if listed[i].id == prefer), None)
                if index is not None:
                    found = self._try(listed[index], booking, now, reaches, bookings)
                    if found is not None:
                        return found
                    chosen = [i for i in chosen if i != index]
                    prefer = None  # tried: the rest is an ordinary search
            scored = self._bounded(fleet_rows, at, chosen, reaches, booking, now, bookings)
        else:
            fleet = [(v, self.plan(v, bookings)) for v in vehicles if v.enabled]
            earliest_anchor = min((v.anchor_t for v, _ in fleet if v.heading_to is not None),
                                  default=now)
            generic = travel.reach(p, latest - min(now, earliest_anchor))
            # Earliest pickup first; the bound: the wait to that pickup, and two stops.
            scored = [(WAIT_WEIGHT * (earliest - now) + floor, vid, vehicle, plan)
                      for earliest, vid, vehicle, plan
                      in self._candidates(generic, fleet, now, pax, latest)]
            if not scored:
                return None
            # Bounds: a pickup-to-node or node-to-dropoff drive lies inside the new ride.
            reaches = (generic, travel.reach(p, booking.max_ride_s, forward=True),
                       travel.reach(d, booking.max_ride_s), travel.reach(d, INF, forward=True))
        best: Insertion | None = None
        if prefer is not None:
            # The offered vehicle first: wherever it ranks, it wins when it still fits.
            scored.sort(key=lambda item: item[1] != prefer)
        for bound, _, vehicle, plan in scored[: self.max_candidates]:
            # Cheapest bound first: once the bound is above the best, no later candidate
            # can win (after the offered vehicle, which wins whatever its cost).
            if self.prune and best is not None and bound > best.cost:
                break
            found = self._try(vehicle, booking, now, reaches, bookings, plan)
            if found is None:
                continue
            if prefer is not None and found.vehicle_id == prefer:
                return found
            if best is None or (found.cost, found.vehicle_id) < (best.cost, best.vehicle_id):
                best = found
        return best

    def _try(self, vehicle: Vehicle, booking: Booking, now: float,
             reaches: tuple[Reach, Reach, Reach, Reach], bookings: Mapping[int, Booking],
             plan: Plan | None = None) -> Insertion | None:
        """The cheapest feasible insertion of ``booking`` into ``vehicle``'s route."""
        if plan is None:
            plan = self.plan(vehicle, bookings)
        start, start_t = self.start_of(vehicle, plan, now)
        stops = self._stop_nodes(self.travel, vehicle, plan)
        return self._best_in_vehicle(booking, vehicle, plan, start, start_t, now, reaches,
                                     stops)

    @staticmethod
    def _candidates(to_p: Reach, fleet: list[tuple[Vehicle, Plan]], now: float, pax: int,
                    latest: float) -> list[tuple[float, int, Vehicle, Plan]]:
        """Vehicles that may be at the pickup by ``latest``, by a lower bound of when
        (exact for an idle vehicle and after a stop; for one driving a leg, from where it
        left, minus the time since: the triangle inequality), earliest first."""
        scored: list[tuple[float, int, Vehicle, Plan]] = []
        for vehicle, plan in fleet:
            route = vehicle.route
            earliest = INF
            if plan.load0 + pax <= vehicle.capacity:
                if vehicle.heading_to is None:
                    earliest = max(now, vehicle.anchor_t) + to_p.time(vehicle.anchor)
                else:
                    earliest = max(now, vehicle.anchor_t + to_p.time(vehicle.anchor))
            dep, load_after = plan.dep, plan.load_after
            for k, node in enumerate(route):
                if load_after[k] + pax <= vehicle.capacity:
                    at = dep[k] + to_p.time(node.pos)
                    if at < earliest:
                        earliest = at
            if earliest <= latest + 1e-6:
                scored.append((earliest, vehicle.id, vehicle, plan))
        scored.sort(key=lambda item: (item[0], item[1]))
        return scored

    def _entries(self, travel: NetworkTravel, vehicle: Vehicle, plan: Plan) -> _Entries:
        """Where a vehicle could turn towards a pickup, as rows (node, time, connector
        seconds, free seats, idle, arrival, on a node: the columns of ``bounds``); cached
        with its plan."""
        cached = self._entries_cache.get(vehicle.id)
        if cached is not None and cached[0] == plan.version:
            return cached[1]
        cap, route = vehicle.capacity, vehicle.route
        node, conn = travel.place(vehicle.anchor)
        idle = 1.0 if vehicle.heading_to is None else 0.0  # a rebalancing vehicle drives
        rows = [(node, vehicle.anchor_t, conn, cap - plan.load0, idle, 0.0, 0.0)]
        node_at = travel.node_at
        for k, stop in enumerate(route):
            node, conn = travel.place(stop.pos)
            rows.append((node, plan.dep[k], conn, cap - plan.load_after[k], 0.0, plan.arr[k],
                         1.0 if stop.pos in node_at else 0.0))
        table = np.array(rows, dtype=np.float64)
        self._entries_cache[vehicle.id] = (plan.version, table)
        return table

    def _fleet_rows(self, travel: NetworkTravel, vehicles: Iterable[Vehicle],
                    bookings: Mapping[int, Booking]) -> _Fleet | None:
        """All vehicles' entries as one array (rows of disabled vehicles have no seat),
        rebuilt only where a vehicle's version or state changed since the last booking
        (between two bookings only a few do)."""
        fleet = vehicles if isinstance(vehicles, list) else list(vehicles)
        if not fleet:
            return None
        cached = self._fleet
        told = self.changed
        if told is not None and cached is not None and len(cached[2]) == len(fleet):
            if not told:
                return cached
            index, keys, listed = self._index, cached[3], cached[2]
            changed = sorted(index.get(vid, -1) for vid in told)
            told.clear()
            # A cheap check of the owner's promise: the vehicles told are where they were.
            if changed[0] >= 0 and all(fleet[i] is listed[i] for i in changed):
                for i in changed:
                    keys[i] = _KEY(fleet[i])
                return self._refresh(travel, fleet, keys, changed, bookings)
        if told is not None:
            told.clear()
        keys = list(map(_KEY, fleet))
        if cached is not None:
            old_keys = cached[3]
            if old_keys == keys:
                return cached
            if len(old_keys) == len(keys):
                changed = list(compress(range(len(keys)), map(ne, old_keys, keys)))
                if all(old_keys[i][0] == keys[i][0] for i in changed):
                    return self._refresh(travel, fleet, keys, changed, bookings)
        tables = [self._table(travel, v, bookings) for v in fleet]
        sizes = np.fromiter(map(len, tables), dtype=np.int64, count=len(tables))
        offsets = np.zeros(len(tables), dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        ids = np.fromiter((v.id for v in fleet), dtype=np.int64, count=len(fleet))
        self._index = {v.id: i for i, v in enumerate(fleet)}
        self._fleet = (np.concatenate(tables), offsets, fleet, keys, ids)
        return self._fleet

    def _refresh(self, travel: NetworkTravel, fleet: list[Vehicle],
                 keys: list[tuple[int, int, bool]], changed: list[int],
                 bookings: Mapping[int, Booking]) -> _Fleet:
        """``_fleet_rows`` when the same vehicles are listed and those at ``changed``
        differ since the cached rows were built: their rows are replaced in the one array
        (a few copies of it, not a concatenation of every vehicle's rows)."""
        assert self._fleet is not None
        rows, offsets, _, _, ids = self._fleet
        last = len(offsets) - 1
        for i in changed:
            table = self._table(travel, fleet[i], bookings)
            start = int(offsets[i])
            end = int(offsets[i + 1]) if i < last else len(rows)
            if end - start == len(table):
                rows[start:end] = table
            else:
                rows = np.concatenate((rows[:start], table, rows[end:]))
                offsets[i + 1:] += len(table) - (end - start)
        self._fleet = (rows, offsets, fleet, keys, ids)
        return self._fleet

    def _table(self, travel: NetworkTravel, vehicle: Vehicle,
               bookings: Mapping[int, Booking]) -> _Entries:
        if not vehicle.enabled:
            return _DISABLED
        return self._entries(travel, vehicle, self.plan(vehicle, bookings))

    def _network_candidates(self, fleet_rows: _Fleet, to_p: NetworkReach, now: float,
                            pax: int, latest: float) -> tuple[_Entries, list[int]]:
        """``_candidates`` on a road network, as array arithmetic over the whole fleet: the
        earliest pickup time from each row, and the fleet indices of the first
        ``max_candidates`` vehicles, earliest possible pickup first."""
        rows, offsets, _, _, ids = fleet_rows
        times, idle = rows[:, 1], rows[:, 4] > 0
        drive = (rows[:, 2] + to_p.dist[rows[:, 0].astype(np.int64)]) * to_p.factor
        at = np.where(idle, np.maximum(times, now) + drive, np.maximum(times + drive, now))
        at[rows[:, 3] < pax] = INF
        earliest = np.minimum.reduceat(at, offsets) + to_p.connector_s * to_p.factor
        ok = np.flatnonzero(earliest <= latest + 1e-6)
        order: list[int] = ok[np.lexsort((ids[ok], earliest[ok]))][: self.max_candidates].tolist()
        at += to_p.connector_s * to_p.factor
        at[at > latest + 1e-6] = INF
        return at, order

    def _bounded(self, fleet_rows: _Fleet, at: _Entries, chosen: list[int],
                 reaches: tuple[Reach, Reach, Reach, Reach], booking: Booking, now: float,
                 bookings: Mapping[int, Booking]) -> list[_Candidate]:
        """The chosen vehicles with a lower bound of their cost (``bounds``), cheapest
        first (ties: by vehicle id)."""
        rows, offsets, fleet, _, ids = fleet_rows
        from_p, from_d = reaches[1], reaches[3]
        assert isinstance(from_p, NetworkReach) and isinstance(from_d, NetworkReach)
        bounds = insertion_lower_bounds(
            rows, offsets, at, (from_p.dist + from_p.connector_s) * from_p.factor,
            (from_d.dist + from_d.connector_s) * from_d.factor, now=now,
            direct_s=booking.direct_s, dwell_s=self.dwell_s, wait_weight=WAIT_WEIGHT)
        picked = np.array(chosen, dtype=np.int64)
        low = bounds[picked] - BOUND_SLACK_S
        out: list[_Candidate] = []
        for i in picked[np.lexsort((ids[picked], low))].tolist():
            vehicle = fleet[i]
            out.append((float(bounds[i]) - BOUND_SLACK_S, vehicle.id, vehicle,
                        self.plan(vehicle, bookings)))
        return out

    def _stop_nodes(self, travel: TravelModel, vehicle: Vehicle,
                    plan: Plan) -> list[int] | None:
        """The network nodes of the vehicle's stops, or None (straight lines, or a stop off
        the network's nodes); cached with its plan."""
        if not isinstance(travel, NetworkTravel):
            return None
        cached = self._stops_cache.get(vehicle.id)
        if cached is not None and cached[0] == plan.version:
            return cached[1]
        node_at = travel.node_at
        found = [node_at.get(stop.pos) for stop in vehicle.route]
        stops = None if None in found else cast(list[int], found)
        self._stops_cache[vehicle.id] = (plan.version, stops)
        return stops

    def _best_in_vehicle(
        self,
        booking: Booking,
        vehicle: Vehicle,
        plan: Plan,
        start: LatLon,
        start_t: float,
        now: float,
        reaches: tuple[Reach, Reach, Reach, Reach],
        stops: list[int] | None = None,
    ) -> Insertion | None:
        """The cheapest feasible insertion into one vehicle's route; ``stops``, the network
        nodes of its stops when all lie on nodes, reads their times without a lookup each."""
        route = vehicle.route
        n = len(route)
        to_p, from_p_r, to_d_r, from_d_r = reaches
        dw = self.dwell_s
        pax, cap = booking.passengers, vehicle.capacity
        latest, max_ride, direct = booking.latest_pickup_t, booking.max_ride_s, booking.direct_s
        arr, dep, slack, load_after = plan.arr, plan.dep, plan.slack, plan.load_after
        if stops is not None:
            assert isinstance(from_p_r, NetworkReach) and isinstance(from_d_r, NetworkReach)
            assert isinstance(to_d_r, NetworkReach) and isinstance(to_p, NetworkReach)
            from_p = from_p_r.times_at(stops)
            from_d = from_d_r.times_at(stops)
            to_d = to_d_r.times_at(stops)
            to_p_after = to_p.times_at(stops)
        else:
            from_p = [from_p_r.time(node.pos) for node in route]
            from_d = [from_d_r.time(node.pos) for node in route]
            to_d = [to_d_r.time(node.pos) for node in route]
            to_p_after = [to_p.time(node.pos) for node in route]
        end_t = dep[n - 1] if n else start_t
        # The best so far as plain values (an Insertion is made once, at the end).
        found = False
        best_i = best_j = 0
        best_cost = best_a_p = 0.0
        for i in range(n + 1):
            if i == 0:
                if plan.load0 + pax > cap:
                    continue
                a_p = start_t + to_p.time(start)
            else:
                if load_after[i - 1] + pax > cap:
                    continue
                a_p = dep[i - 1] + to_p_after[i - 1]
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
                delta = a_d + dw - end_t
                feasible = True
            if feasible:
                cost = delta + wait_cost
                if not found or cost < best_cost:
                    found, best_i, best_j, best_cost, best_a_p = True, i, i, cost, a_p
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
                if not found or cost < best_cost:
                    found, best_i, best_j, best_cost, best_a_p = True, i, j, cost, a_p
        if not found:
            return None
        return Insertion(vehicle.id, best_i, best_j, best_cost, best_a_p)


def apply_insertion(route: list[RouteNode], ins: Insertion, pickup: RouteNode,
                    dropoff: RouteNode) -> list[RouteNode]:
    """The route with the booking's two nodes put where ``ins`` says."""
    return [*route[:ins.i], pickup, *route[ins.i:ins.j], dropoff, *route[ins.j:]]
