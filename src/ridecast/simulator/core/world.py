"""The simulated world's state and the state changes every caller shares.

``World`` holds the fleet, bookings, offers and nodes, the scheduler and the event emitter,
and implements the steps of a booking's life (offer, assign, cancel, re-plan) and of a
vehicle's movement (re-anchoring, route changes). ``Engine`` adds the timers that drive it
and the operation entry points; both never await.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict, deque
from datetime import datetime
from typing import Any

from .acceptance import acceptance_probability
from .emit import Emitter
from .model import (
    Booking,
    BookingStatus,
    NodeType,
    Offer,
    OfferStatus,
    RouteNode,
    Vehicle,
)
from .network import NetworkTravel, travel_for
from .polyline import LatLon, encode
from .rng import Source, Streams
from .scheduler import Insertion, Plan, Scheduler, apply_insertion, build_plan
from .settings import BBox, SimulatorSettings
from .tally import ENDED, Sample, Tally
from .travel import TravelModel

# Timer kinds; a heap entry is (time, seq, kind, target id, version).
(DEMAND, RESPOND, EXPIRE, ARRIVE, GPS, SNAPSHOT, TRACKER, CANCEL, CHANGE, BREAK, UNBREAK,
 WARMUP, REBALANCE, RELOCATED, CONGESTION, END, REOPTIMISE, RETRY) = range(18)

ENCODED_LEGS = 20_000

OPEN_STATES = (BookingStatus.OFFERED, BookingStatus.ASSIGNED, BookingStatus.PICKED_UP)

KEEP_FINISHED_S = 3600.0
"""Simulated seconds an ended booking is kept (at least the rebalancing window) before it
is retired into the KPIs' tally (tally.py)."""
DECISION_DIGITS = 3
"""Significant digits of the scheduler decision times the KPIs' percentiles are taken of."""


def keep_finished_s(settings: SimulatorSettings) -> float:
    """How long an ended booking stays in the engine: rebalancing reads every request of
    its window (rebalance.py), so at least that."""
    return max(KEEP_FINISHED_S, settings.rebalance_window_s)


class World:
    """Fleet, bookings, offers and the shared state changes; see the module docstring."""

    def __init__(self, simulation_id: int, settings: SimulatorSettings, start: datetime,
                 travel: TravelModel | None = None) -> None:
        self.settings = settings
        self.now = 0.0
        self.streams = Streams(settings.seed)
        self.travel: TravelModel = travel or travel_for(settings)
        self.scheduler = Scheduler(self.travel, settings.dwell_s, settings.max_candidates)
        # Every change of a vehicle's version or enabled is told to the scheduler (rearm,
        # set_enabled): its fleet rows are refreshed without a scan of the fleet.
        self.scheduler.changed = set()
        self.emitter = Emitter(simulation_id, start.timestamp())
        self.vehicles: dict[int, Vehicle] = {}
        self.bookings: dict[int, Booking] = {}
        self.offers: dict[int, Offer] = {}
        self.nodes: dict[int, RouteNode] = {}
        #: Wall-clock milliseconds of each scheduler decision (to ``DECISION_DIGITS``).
        self.decisions = Sample(significant=DECISION_DIGITS)
        #: Ended bookings, (when they ended, id) in that order, until they are retired.
        self._ended: deque[tuple[float, int]] = deque()
        self.keep_finished_s = keep_finished_s(settings)
        #: The KPIs' share of the retired bookings (and their offers).
        self.tally = Tally(settings.dwell_s, settings.kpi_warmup_s)
        self._encoded: OrderedDict[tuple[LatLon, LatLon], str] = OrderedDict()
        #: Per vehicle (vehicle m, empty m, passenger m) driven before the warm-up ended.
        self.warmup_m: dict[int, tuple[float, float, float]] | None = None
        self.open_bookings = 0
        self.on_break: set[int] = set()
        #: Simulated riders' requests waiting for a retry (``retry_s``), by booking id.
        self.retrying: set[int] = set()
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._ids = {"booking": 0, "offer": 0, "node": 0}

    # ---- small helpers ---------------------------------------------------------------

    def next_id(self, kind: str) -> int:
        self._ids[kind] += 1
        return self._ids[kind]

    def at(self, t: float, kind: int, target: int = 0, version: int = 0) -> None:
        """Schedule a timer."""
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, target, version))

    def random_point(self, source: Source) -> LatLon:
        rng = self.streams[source]
        area = self.settings.area
        if isinstance(area, BBox):
            return self.travel.snap((rng.uniform(area.min_lat, area.max_lat),
                                     rng.uniform(area.min_lon, area.max_lon)))
        r = area.radius_m * math.sqrt(rng.random())
        theta = rng.random() * 2.0 * math.pi
        dlat = r * math.cos(theta) / 111_195.0
        dlon = r * math.sin(theta) / (111_195.0 * math.cos(math.radians(area.lat)))
        return self.travel.snap((area.lat + dlat, area.lon + dlon))

    def set_status(self, booking: Booking, status: BookingStatus) -> None:
        """Change a booking's status, keeping the count of open bookings."""
        was_open = booking.status in OPEN_STATES
        booking.status = status
        self.open_bookings += (status in OPEN_STATES) - was_open
        if status in ENDED:
            self._ended.append((self.now, booking.id))
            self.retire()

    def retire(self) -> None:
        """Retire the bookings that ended over ``keep_finished_s`` ago: their share of the
        KPIs goes into the tally, and they, their offers and their nodes are dropped. Only
        state no timer or route refers to any more goes (an ended booking is on no route,
        and a timer of it finds it gone as it would find it ended); the run's events do not
        depend on when this runs."""
        ended = self._ended
        horizon = self.now - self.keep_finished_s
        retired: list[tuple[Booking, Offer | None]] = []
        while ended and ended[0][0] < horizon:
            _, booking_id = ended.popleft()
            booking = self.bookings.pop(booking_id, None)
            if booking is None:
                continue
            offer = (self.offers.pop(booking.offer_id, None) if booking.offer_id is not None
                     else None)
            retired.append((booking, offer))
            for node in (booking.pickup_node, booking.dropoff_node):
                if node is not None:
                    self.nodes.pop(node.id, None)
        if retired:
            self.tally.add(retired)

    def position(self, vehicle: Vehicle, *, keep: bool = False) -> tuple[LatLon, float, float]:
        """(position, bearing, speed m/s) of a vehicle now; ``keep``: it becomes the
        vehicle's anchor (see ``TravelModel.position``)."""
        target = vehicle.heading_to
        if target is None:
            return vehicle.anchor, 0.0, 0.0
        if self.now <= vehicle.anchor_t:
            heading = self.travel.position(vehicle.anchor, target, 0.0)[1]
            return vehicle.anchor, heading, 0.0
        pos, heading = self.travel.position(vehicle.anchor, target, self.now - vehicle.anchor_t,
                                            keep=keep)
        if pos == target:
            return pos, heading, 0.0
        travel = self.travel
        if isinstance(travel, NetworkTravel):
            # The speed on the street the vehicle is on now, not the network's top speed.
            speed = travel.speed_mps_at(vehicle.anchor, target, self.now - vehicle.anchor_t)
        else:
            speed = travel.speed_mps
        return pos, heading, speed

    def drive(self, vehicle: Vehicle, to: LatLon, metres: float | None = None) -> None:
        """Count the distance from the anchor to ``to`` (empty and passenger km too);
        ``metres``: the distance when it is known (part of a leg, ``leg_m``)."""
        if metres is None:
            metres = self.travel.distance_m(vehicle.anchor, to)
        load = vehicle.load
        vehicle.vehicle_m += metres
        vehicle.passenger_m += metres * load
        if load == 0:
            vehicle.empty_m += metres
        if vehicle.target is not None and not vehicle.route:
            vehicle.rebalance_m += metres

    def leg_m(self, vehicle: Vehicle, pos: LatLon) -> float:
        """Metres a moving vehicle has driven from its anchor to ``pos``, where it is now:
        along its street on a network (see ``NetworkTravel.travelled_m``)."""
        travel, target = self.travel, vehicle.heading_to
        if isinstance(travel, NetworkTravel) and target is not None:
            return travel.travelled_m(vehicle.anchor, target, self.now - vehicle.anchor_t)
        return travel.distance_m(vehicle.anchor, pos)

    def driven_m(self, vehicle: Vehicle) -> tuple[float, float, float]:
        """(vehicle m, empty m, passenger m) so far, the leg in progress included."""
        vm, em, pm = vehicle.vehicle_m, vehicle.empty_m, vehicle.passenger_m
        if vehicle.heading_to is not None and self.now > vehicle.anchor_t:
            pos, _, _ = self.position(vehicle)
            metres = self.leg_m(vehicle, pos)
            load = vehicle.load
            vm += metres
            pm += metres * load
            em += metres if load == 0 else 0.0
        return vm, em, pm

    def reanchor(self, vehicle: Vehicle) -> None:
        """Make the vehicle's current position its anchor, so that its route can change."""
        if vehicle.heading_to is not None and self.now > vehicle.anchor_t:
            pos, _, _ = self.position(vehicle, keep=True)
            self.drive(vehicle, pos, self.leg_m(vehicle, pos))
            vehicle.anchor = pos
        vehicle.target = None  # a rebalancing drive ends wherever the vehicle is
        vehicle.anchor_t = max(vehicle.anchor_t, self.now)

    def path(self, vehicle: Vehicle) -> list[LatLon]:
        """The geometry the vehicle will drive: anchor, then each node."""
        points = [vehicle.anchor]
        for node in vehicle.route:
            points.extend(self.travel.path(points[-1], node.pos)[1:])
        if vehicle.target is not None and not vehicle.route:
            points.extend(self.travel.path(vehicle.anchor, vehicle.target)[1:])
        return points

    def encoded_leg(self, a: LatLon, b: LatLon) -> str:
        """The polyline5 of the drive from a to b; an LRU of ``ENCODED_LEGS`` (a route change
        re-sends every edge of the route, most of them unchanged)."""
        key = (a, b)
        text = self._encoded.get(key)
        if text is None:
            text = self._encoded[key] = encode(self.travel.path(a, b))
            if len(self._encoded) > ENCODED_LEGS:
                self._encoded.popitem(last=False)
        return text

    def node_dicts(self, route: list[RouteNode]) -> list[dict[str, Any]]:
        return [n.to_dict(self.bookings[n.booking_id].passengers) for n in route]

    # ---- route changes ---------------------------------------------------------------

    def _tell(self, vehicle: Vehicle) -> None:
        """The scheduler's fleet rows of ``vehicle`` are stale (``Scheduler.changed``)."""
        changed = self.scheduler.changed
        if changed is not None:
            changed.add(vehicle.id)

    def rearm(self, vehicle: Vehicle) -> Plan:
        """New version: the cached plan and any pending arrival timer become stale."""
        vehicle.version += 1
        self._tell(vehicle)
        # Fleet utilisation (kpis.py): spans of time with stops to make.
        if vehicle.route:
            if vehicle.busy_since is None:
                vehicle.busy_since = self.now
        elif vehicle.busy_since is not None:
            vehicle.busy_s += self.now - vehicle.busy_since
            vehicle.busy_since = None
        plan = self.scheduler.plan(vehicle, self.bookings)
        if vehicle.route or vehicle.target is not None:
            if vehicle.route:
                self.at(plan.arr[0], ARRIVE, vehicle.id, vehicle.version)
            else:
                assert vehicle.target is not None
                arrive = vehicle.anchor_t + self.travel.duration_s(vehicle.anchor,
                                                                   vehicle.target)
                self.at(arrive, RELOCATED, vehicle.id, vehicle.version)
            if not vehicle.gps_running:
                vehicle.gps_running = True
                self.at(self.now + self.settings.gps_interval_s, GPS, vehicle.id)
        return plan

    def route_changed(self, vehicle: Vehicle, *, nodes_changed: bool = True,
                      instance_changed: bool = False, assignment: bool = True) -> None:
        """Publish a changed route (assignment, vehicle_state_changed) and re-arm timers."""
        plan = self.rearm(vehicle)
        for k, node in enumerate(vehicle.route):
            if node.scheduled_t is None:
                node.scheduled_t = plan.arr[k]
        t = self.now
        if assignment:
            edges = []
            for a, b in zip(vehicle.route, vehicle.route[1:], strict=False):
                edges.append({"from_node_id": a.id, "to_node_id": b.id,
                              "polyline5": self.encoded_leg(a.pos, b.pos),
                              "edge_type": "between_nodes"})
            self.emitter.assignment(t, vehicle, self.node_dicts(vehicle.route), edges)
        self.emitter.state_changed(t, vehicle, self.path(vehicle), nodes_changed,
                                   instance_changed)

    def insert(self, booking: Booking, ins: Insertion) -> None:
        """Put an accepted booking into the route the insertion names."""
        vehicle = self.vehicles[ins.vehicle_id]
        pickup, dropoff = booking.pickup_node, booking.dropoff_node
        assert pickup is not None and dropoff is not None
        pickup.scheduled_t = dropoff.scheduled_t = None
        self.reanchor(vehicle)
        vehicle.route = apply_insertion(vehicle.route, ins, pickup, dropoff)
        booking.vehicle_id = vehicle.id
        self.set_status(booking, BookingStatus.ASSIGNED)
        self.route_changed(vehicle)

    def find(self, booking: Booking, prefer: int | None = None) -> Insertion | None:
        """Run the scheduler, timing the decision."""
        began = time.perf_counter()
        found = self.scheduler.best_insertion(booking, self.vehicles.values(), self.bookings,
                                              self.now, prefer)
        self.decisions.add((time.perf_counter() - began) * 1000.0)
        return found

    def make_nodes(self, booking: Booking) -> None:
        if booking.pickup_node is not None:
            return
        for kind, pos in ((NodeType.PICKUP, booking.pickup), (NodeType.DROPOFF, booking.dropoff)):
            node = RouteNode(self.next_id("node"), self.streams.uuid(), booking.id, kind, pos)
            self.nodes[node.id] = node
            if kind is NodeType.PICKUP:
                booking.pickup_node = node
            else:
                booking.dropoff_node = node

    def offer(self, booking: Booking) -> Offer | None:
        """calc_started, scheduler_result, then offers or no_offer."""
        t = self.now
        self.emitter.calc_started(t, [booking])
        ins = self.find(booking)
        s = self.settings
        if (ins is None and booking.auto_respond
                and t + s.retry_interval_s <= booking.requested_t + s.retry_s):
            # As MATSim's DRT: tried again a little later before the rider is refused.
            self.retrying.add(booking.id)
            self.at(t + s.retry_interval_s, RETRY, booking.id)
            return None
        if ins is None:
            self.set_status(booking, BookingStatus.NO_OFFER)
            self.emitter.no_offer(t, booking)
            return None
        vehicle = self.vehicles[ins.vehicle_id]
        self.make_nodes(booking)
        assert booking.pickup_node is not None and booking.dropoff_node is not None
        proposal = apply_insertion(vehicle.route, ins, booking.pickup_node, booking.dropoff_node)
        self.emitter.scheduler_result(t, vehicle, self.node_dicts(proposal), ins.cost)
        offer = Offer(self.next_id("offer"), self.streams.uuid(), booking.id, vehicle.id,
                      ins.pickup_t, t + self.settings.offer_timeout_s)
        if booking.auto_respond:
            # What a simulated rider weighs (acceptance.py): the ride the offer plans.
            plan = build_plan(vehicle, proposal, self.bookings, self.travel,
                              self.settings.dwell_s)
            p_at, d_at = ins.i, ins.j + 1
            offer.ride_s = max(0.0, plan.arr[d_at] - plan.dep[p_at])
        self.offers[offer.id] = offer
        booking.offer_id = offer.id
        self.set_status(booking, BookingStatus.OFFERED)
        self.emitter.offers(t, offer, booking, vehicle)
        self.at(offer.expires_t, EXPIRE, offer.id)
        return offer

    def accept(self, offer: Offer, reason: str) -> None:
        """offer_accepted, then the assignment (or a cancellation if no vehicle fits now)."""
        offer.status = OfferStatus.ACCEPTED
        self.emitter.offer_answer(self.now, offer, True, reason)
        booking = self.bookings[offer.booking_id]
        # Re-plan now: routes may have changed since the offer; keep the offered vehicle
        # whenever it still fits.
        ins = self.find(booking, prefer=offer.vehicle_id)
        if ins is None:
            self.set_status(booking, BookingStatus.CANCELLED)
            booking.cancel_reason = "no_vehicle"
            self.emitter.cancellation(self.now, booking, "no_vehicle")
            return
        self.insert(booking, ins)
        if booking.auto_respond:
            self._plan_rider_changes(booking, ins.pickup_t)

    def reject(self, offer: Offer, status: OfferStatus, reason: str) -> None:
        offer.status = status
        self.set_status(self.bookings[offer.booking_id], BookingStatus.REJECTED)
        self.emitter.offer_answer(self.now, offer, False, reason)

    def new_booking(self, pickup: tuple[float, float], dropoff: tuple[float, float],
                    passengers: int, max_wait_s: float, *, auto: bool) -> Booking:
        """bookings, then the scheduler's answer; a rider simulated by ``auto`` answers."""
        direct_s = self.travel.duration_s(pickup, dropoff)
        booking = Booking(
            id=self.next_id("booking"), uid=self.streams.uuid(), session_uid=self.streams.uuid(),
            pickup=pickup, dropoff=dropoff, passengers=passengers, requested_t=self.now,
            max_wait_s=max_wait_s, direct_s=direct_s,
            direct_m=self.travel.distance_m(pickup, dropoff),
            max_ride_s=direct_s * self.settings.max_detour_factor + self.settings.dwell_s,
            auto_respond=auto)
        self.bookings[booking.id] = booking
        self.emitter.bookings(self.now, booking)
        offer = self.offer(booking)
        if auto and offer is not None:
            self.rider_answers(booking, offer)
        return booking

    def rider_answers(self, booking: Booking, offer: Offer) -> None:
        """A simulated rider's answer to an offer, as a timer."""
        rng = self.streams[Source.ACCEPTANCE]
        accept, expire, delay = rng.random(), rng.random(), rng.random()
        if accept < acceptance_probability(self.settings, offer.estimated_pickup_t - self.now,
                                           offer.ride_s / max(1e-9, booking.direct_s)):
            self.at(self.now + 2.0 + delay * 20.0, RESPOND, offer.id, 1)
        elif expire >= self.settings.expiry_share:
            self.at(self.now + 2.0 + delay * 20.0, RESPOND, offer.id, 0)
        # else: the rider never answers and the offer expires.

    def _plan_rider_changes(self, booking: Booking, pickup_t: float) -> None:
        # A fixed number of draws per booking keeps each stream aligned whatever happens.
        window = max(1.0, pickup_t - self.now)
        c = self.streams[Source.CANCELLATION]
        if c.random() < self.settings.cancellation_probability:
            self.at(self.now + c.random() * window * 0.8, CANCEL, booking.id)
        else:
            c.random()
        d = self.streams[Source.DEMAND_CHANGE]
        u, when, up = d.random(), d.random(), d.random()
        if u < self.settings.demand_change_probability:
            self.at(self.now + when * window * 0.8, CHANGE, booking.id, 1 if up < 0.5 else -1)

    def remove_booking(self, booking: Booking) -> Vehicle | None:
        """Take a not-yet-picked-up booking off its vehicle's route (no events)."""
        if booking.vehicle_id is None:
            return None
        vehicle = self.vehicles[booking.vehicle_id]
        self.reanchor(vehicle)
        vehicle.route = [n for n in vehicle.route if n.booking_id != booking.id]
        booking.vehicle_id = None
        return vehicle

    def cancel(self, booking: Booking, reason: str) -> None:
        """bookings_cancellation; a vehicle that was to serve the booking gets a new route."""
        if booking.status is BookingStatus.OFFERED and booking.offer_id is not None:
            self.offers[booking.offer_id].status = OfferStatus.VOID
        vehicle = self.remove_booking(booking)
        self.set_status(booking, BookingStatus.CANCELLED)
        booking.cancel_reason = reason
        self.emitter.cancellation(self.now, booking, reason)
        if vehicle is not None:
            self.route_changed(vehicle)

    def set_enabled(self, vehicle: Vehicle, enabled: bool, reason: str) -> None:
        """vehicle_use; a disabled vehicle keeps its passengers on board and hands the
        bookings it has not picked up yet to other vehicles."""
        vehicle.enabled = enabled
        self._tell(vehicle)
        self.emitter.vehicle_use(self.now, vehicle, reason)
        if enabled:
            self.reanchor(vehicle)
            self.route_changed(vehicle, nodes_changed=False, instance_changed=True,
                               assignment=False)
            return
        moved = [self.bookings[n.booking_id] for n in vehicle.route
                 if n.node_type is NodeType.PICKUP]
        self.reanchor(vehicle)
        for booking in moved:
            booking.vehicle_id = None
        vehicle.route = [n for n in vehicle.route if n.booking_id in vehicle.onboard]
        self.route_changed(vehicle, nodes_changed=bool(moved), instance_changed=True)
        for booking in moved:
            ins = self.find(booking)
            if ins is None:
                self.set_status(booking, BookingStatus.CANCELLED)
                booking.cancel_reason = "vehicle_disabled"
                self.emitter.cancellation(self.now, booking, "vehicle_disabled")
            else:
                self.insert(booking, ins)

