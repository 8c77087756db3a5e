"""The discrete-event core of the simulator: timers, the vehicle's day, and the operations.

``Engine.advance(until)`` runs every timer due up to ``until`` (simulated seconds since the
start) in (time, creation) order and returns the events they produced: the same seed and
settings always give the same stream. The operation entry points (``create_booking``,
``accept_offer``, ``node_status``...) act at the engine's current time; each validates first
and raises a ridecast error *before* changing anything, so a refused operation publishes
nothing.
"""

from __future__ import annotations

import heapq
import math
from datetime import datetime
from math import cos, hypot, radians
from typing import Any

from .demand import Zones, arrival_times
from .emit import Event
from .model import BookingStatus, NodeType, OfferStatus, Vehicle
from .network import NetworkTravel
from .operations import Operations
from .rebalance import plan_moves
from .reoptimise import reoptimise
from .rng import Source
from .settings import SimulatorSettings
from .travel import TravelModel
from .world import (
    ARRIVE,
    BREAK,
    CANCEL,
    CHANGE,
    CONGESTION,
    DEMAND,
    END,
    EXPIRE,
    GPS,
    REBALANCE,
    RELOCATED,
    REOPTIMISE,
    RESPOND,
    RETRY,
    SNAPSHOT,
    TRACKER,
    UNBREAK,
    WARMUP,
)


class Engine(Operations):
    """A seeded ride-pooling simulation; see the module docstring.

    >>> engine = Engine(1, SimulatorSettings(vehicles=3), datetime(2024, 1, 1, tzinfo=UTC))
    >>> events = engine.advance(600.0)
    """

    def __init__(self, simulation_id: int, settings: SimulatorSettings, start: datetime,
                 travel: TravelModel | None = None) -> None:
        super().__init__(simulation_id, settings, start, travel)
        self.start = start
        s = settings
        for vid in range(1, s.vehicles + 1):
            pos = self.random_point(Source.FLEET)
            self.vehicles[vid] = Vehicle(vid, self.streams.uuid(), s.capacity, pos)
        self._arrivals = arrival_times(s, start, self.streams[Source.DEMAND])
        self.zones = Zones(s, self.streams[Source.HOT_SPOTS])
        self._next_arrival = 0
        if self._arrivals:
            self.at(self._arrivals[0], DEMAND)
        breaks = self.streams[Source.BREAKS]
        for vid in self.vehicles:
            u, when = breaks.random(), breaks.random()
            if u < s.vehicle_break_probability:
                self.at((0.1 + 0.6 * when) * s.duration_s, BREAK, vid)
        self.at(0.0, SNAPSHOT)
        # The end of demand is a timer: a run with nothing open then finishes at that
        # instant, not wherever the runner's step happened to end (see ``advance``).
        self.at(s.duration_s, END)
        if s.kpi_warmup_s > 0:
            self.at(s.kpi_warmup_s, WARMUP)
        # Congestion (road network only): one factor per clock hour, changed on the hour.
        self._factors: list[float] = []
        self._clock0 = start.hour * 3600.0 + start.minute * 60.0 + start.second
        if isinstance(self.travel, NetworkTravel):
            self.travel.factor = self.congestion_at(0.0)
            self.at(3600.0 - self._clock0 % 3600.0, CONGESTION)
        if s.rebalance_interval_s > 0:
            self.at(s.rebalance_interval_s, REBALANCE)
        if s.performance_tracker_enabled:
            self.at(s.arrival_interval_s, TRACKER)
        self._reopt_cursor = 0
        self.reoptimised = 0  # bookings moved by re-optimisation
        if s.reoptimise_interval_s > 0:
            self.at(s.reoptimise_interval_s, REOPTIMISE)
        self._handlers = {
            DEMAND: self._on_demand, RESPOND: self._on_respond, EXPIRE: self._on_expire,
            ARRIVE: self._on_arrive, GPS: self._on_gps, SNAPSHOT: self._on_snapshot,
            TRACKER: self._on_tracker, CANCEL: self._on_cancel, CHANGE: self._on_change,
            BREAK: self._on_break, UNBREAK: self._on_unbreak, WARMUP: self._on_warmup,
            REBALANCE: self._on_rebalance, RELOCATED: self._on_relocated,
            CONGESTION: self._on_congestion, END: self._on_end,
            REOPTIMISE: self._on_reoptimise, RETRY: self._on_retry,
        }

    # ---- running ---------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Demand is over and every booking, offer and break has come to its end."""
        return (self.now >= self.settings.duration_s
                and self._next_arrival >= len(self._arrivals)
                and self.open_bookings == 0 and not self.on_break and not self.retrying)

    @property
    def next_t(self) -> float | None:
        """When the next timer is due (None when nothing is scheduled)."""
        return self._heap[0][0] if self._heap else None

    def advance(self, until: float) -> list[Event]:
        """Run every timer due up to ``until`` and return the events, in order.

        The events do not depend on how time is cut into calls: ``advance(a)`` then
        ``advance(b)`` gives what ``advance(b)`` gives (tests/simulator/test_steps.py). The
        clock only moves to ``until`` between timers, and whether the run has finished is
        decided when a timer runs (the end of demand is one), never by where ``until`` fell.
        """
        heap = self._heap
        handlers = self._handlers
        duration = self.settings.duration_s
        # ``not self.finished`` without its property call while demand still runs.
        while heap and heap[0][0] <= until and (self.now < duration or not self.finished):
            t, _, kind, target, version = heapq.heappop(heap)
            self.now = max(self.now, t)
            handlers[kind](target, version)
        if not self.finished:
            self.now = max(self.now, until)
        return self.emitter.drain()

    def timestamp(self, t: float | None = None) -> str:
        """ISO 8601 of simulated time ``t`` (default: now)."""
        return self.emitter.ts(self.now if t is None else t)

    # ---- timers ----------------------------------------------------------------------

    def _on_demand(self, _target: int, _version: int) -> None:
        rng = self.streams[Source.DEMAND]
        snap = self.travel.snap
        pickup = self.zones.draw(rng, snap)
        dropoff = self.zones.draw(rng, snap)
        for _ in range(20):
            if self.travel.distance_m(pickup, dropoff) >= self.settings.min_trip_m:
                break
            dropoff = self.zones.draw(rng, snap)
        u = rng.random()
        passengers = min(self.settings.capacity, 1 if u < 0.7 else 2 if u < 0.9 else 3)
        self.new_booking(pickup, dropoff, passengers, self.settings.max_wait_s, auto=True)
        self._next_arrival += 1
        if self._next_arrival < len(self._arrivals):
            self.at(self._arrivals[self._next_arrival], DEMAND)

    # A timer of a booking or offer retired since (world.py ``retire``) finds it ended: as
    # one of an ended booking, it does nothing.

    def _on_respond(self, offer_id: int, accept: int) -> None:
        offer = self.offers.get(offer_id)
        if offer is None or offer.status is not OfferStatus.PENDING:
            return
        if accept:
            self.accept(offer, "rider")
        else:
            self.reject(offer, OfferStatus.REJECTED, "rider")

    def _on_expire(self, offer_id: int, _version: int) -> None:
        offer = self.offers.get(offer_id)
        if offer is not None and offer.status is OfferStatus.PENDING:
            self.reject(offer, OfferStatus.EXPIRED, "expired")

    def _on_arrive(self, vehicle_id: int, version: int) -> None:
        vehicle = self.vehicles[vehicle_id]
        if version != vehicle.version or not vehicle.route:
            return  # the route changed since this timer was set
        node = vehicle.route[0]
        booking = self.bookings[node.booking_id]
        no_show = False
        if node.node_type is NodeType.PICKUP:
            no_show = self.streams[Source.NO_SHOW].random() < self.settings.no_show_probability
        self.complete(vehicle, node, booking, no_show=no_show, note=None)

    def _on_gps(self, vehicle_id: int, _version: int) -> None:
        vehicle = self.vehicles[vehicle_id]
        if not vehicle.route and vehicle.target is None and self.now > vehicle.anchor_t:
            vehicle.gps_running = False
            return
        pos, heading, speed = self.position(vehicle)
        rng = self.streams[Source.GPS_NOISE]
        sigma = self.settings.gps_noise_m
        north, east = rng.gauss(0.0, sigma), rng.gauss(0.0, sigma)
        # Clipped to 3 sigma as a distance (not per axis), so a fix stays within 3 sigma of
        # the street the vehicle is on.
        scale = min(1.0, 3 * sigma / max(1e-9, hypot(north, east)))
        dn = north * scale / 111_195.0
        de = east * scale / 111_195.0
        noisy = (pos[0] + dn, pos[1] + de / max(0.01, cos(radians(pos[0]))))
        self.emitter.gps(self.now, vehicle, noisy, heading, speed)
        self.at(self.now + self.settings.gps_interval_s, GPS, vehicle_id)

    def _on_snapshot(self, _target: int, _version: int) -> None:
        states: list[dict[str, Any]] = []
        for vehicle in self.vehicles.values():
            pos, _, _ = self.position(vehicle)
            states.append({
                "id": vehicle.id, "lat": pos[0], "lon": pos[1], "status": vehicle.status,
                "current_route": [{"node_id": n.id, "node_type": n.node_type.value,
                                   "booking_id": n.booking_id} for n in vehicle.route],
                "agent_id": vehicle.uid, "capacity": vehicle.capacity, "load": vehicle.load})
        self.emitter.vehicle_states(self.now, states)
        self.at(self.now + self.settings.snapshot_interval_s, SNAPSHOT)

    def _on_tracker(self, _target: int, _version: int) -> None:
        for vehicle in self.vehicles.values():
            if not vehicle.route:
                continue
            plan = self.scheduler.plan(vehicle, self.bookings)
            pos, _, _ = self.position(vehicle)
            begin = max(self.now, vehicle.anchor_t)
            grouped: list[tuple[int, float]] = []
            for k, node in enumerate(vehicle.route):
                earliest = begin + self.travel.duration_s(pos, node.pos)
                booking = self.bookings[node.booking_id]
                self.emitter.arrival(self.now, vehicle, booking, node, earliest, plan.arr[k])
                grouped.append((node.id, earliest))
            self.emitter.arrival_grouped(self.now, vehicle, grouped)
        self.at(self.now + self.settings.arrival_interval_s, TRACKER)

    def _on_cancel(self, booking_id: int, _version: int) -> None:
        booking = self.bookings.get(booking_id)
        if booking is not None and booking.status in (BookingStatus.OFFERED,
                                                      BookingStatus.ASSIGNED):
            self.cancel(booking, "rider")

    def _on_change(self, booking_id: int, direction: int) -> None:
        booking = self.bookings.get(booking_id)
        # One more or one fewer rider; the other way when that does not fit.
        if (booking is not None and booking.status is BookingStatus.ASSIGNED
                and not self.change_demand(booking, booking.passengers + direction)):
            self.change_demand(booking, booking.passengers - direction)

    def _on_end(self, _target: int, _version: int) -> None:
        # No event: demand is over; ``finished`` is looked at before the next timer.
        pass

    def _on_warmup(self, _target: int, _version: int) -> None:
        # No event: the KPIs measure driving from here on (see kpis.py).
        self.warmup_m = {vid: self.driven_m(v) for vid, v in self.vehicles.items()}

    def congestion_at(self, t: float) -> float:
        """The congestion factor in force at simulated time t (seeded, one per clock hour:
        the profile's value x log-normal noise, at least 1)."""
        k = int((self._clock0 + t) // 3600.0)
        rng = self.streams[Source.CONGESTION]
        s = self.settings
        first_hour = int(self._clock0 // 3600.0)
        while len(self._factors) <= k - first_hour:
            hour = (first_hour + len(self._factors)) % 24
            noise = math.exp(rng.gauss(0.0, s.congestion_noise)) if s.congestion_noise else 1.0
            self._factors.append(max(1.0, s.congestion_profile[hour] * noise))
        return self._factors[k - first_hour]

    def _on_congestion(self, _target: int, _version: int) -> None:
        """On the hour: vehicles on the road keep where they are, then drive on at the new
        hour's speeds (no event: paths do not change, only times)."""
        travel = self.travel
        assert isinstance(travel, NetworkTravel)
        factor = self.congestion_at(self.now + 1.0)
        self.at(self.now + 3600.0, CONGESTION)
        if factor == travel.factor:
            return
        moving = [v for v in self.vehicles.values() if v.heading_to is not None]
        for vehicle in moving:
            if self.now > vehicle.anchor_t:
                pos, _, _ = self.position(vehicle, keep=True)
                self.drive(vehicle, pos, self.leg_m(vehicle, pos))
                vehicle.anchor, vehicle.anchor_t = pos, self.now
        travel.factor = factor
        for vehicle in moving:
            self.rearm(vehicle)

    def _on_rebalance(self, _target: int, _version: int) -> None:
        """Send idle vehicles towards the demand seen lately (rebalance.py)."""
        if self.now >= self.settings.duration_s:
            return  # no more demand to wait for
        self.at(self.now + self.settings.rebalance_interval_s, REBALANCE)
        idle = [v for v in self.vehicles.values()
                if v.enabled and not v.route and v.id not in self.on_break]
        for vehicle, goal in plan_moves(self.bookings, idle, self.now, self.settings,
                                        self.settings.area_centre()):
            self.reanchor(vehicle)
            vehicle.target = goal
            self.route_changed(vehicle, nodes_changed=False, assignment=False)

    def _on_reoptimise(self, _target: int, _version: int) -> None:
        """Bookings not yet picked up move where they now fit best (reoptimise.py)."""
        if self.open_bookings == 0 and self.now >= self.settings.duration_s:
            return
        self.at(self.now + self.settings.reoptimise_interval_s, REOPTIMISE)
        self._reopt_cursor, moved = reoptimise(self, self._reopt_cursor,
                                               self.settings.reoptimise_max_bookings)
        self.reoptimised += moved

    def _on_retry(self, booking_id: int, _version: int) -> None:
        """A request that found no vehicle is tried again (``retry_s``)."""
        self.retrying.discard(booking_id)
        booking = self.bookings[booking_id]
        offer = self.offer(booking)
        if offer is not None:
            self.rider_answers(booking, offer)

    def _on_relocated(self, vehicle_id: int, version: int) -> None:
        vehicle = self.vehicles[vehicle_id]
        if version != vehicle.version or vehicle.target is None or vehicle.route:
            return  # the vehicle got a route (or stopped) on the way
        self.drive(vehicle, vehicle.target)
        vehicle.anchor, vehicle.anchor_t, vehicle.target = vehicle.target, self.now, None
        self.rearm(vehicle)

    def _on_break(self, vehicle_id: int, _version: int) -> None:
        vehicle = self.vehicles[vehicle_id]
        if vehicle.enabled:
            self.on_break.add(vehicle_id)
            self.set_enabled(vehicle, False, "break")
            self.at(self.now + self.settings.break_duration_s, UNBREAK, vehicle_id)

    def _on_unbreak(self, vehicle_id: int, _version: int) -> None:
        vehicle = self.vehicles[vehicle_id]
        if vehicle_id in self.on_break:
            self.on_break.discard(vehicle_id)
            if not vehicle.enabled:
                self.set_enabled(vehicle, True, "break_over")
