"""What operators, rider apps and driver apps can do to a running simulation.

Each entry point validates its input against the current state first and raises a ridecast
error (``NotFound`` 404, ``BadRequest`` 400, ``Conflict`` 409 ``invalid_state``) before
changing anything, so a refused operation publishes nothing. On success it returns the
response body and the events the operation caused, in order.
"""

from __future__ import annotations

from typing import Any

from ...errors import BadRequest, Conflict, NotFound
from .emit import Event
from .model import Booking, BookingStatus, NodeType, Offer, OfferStatus, RouteNode, Vehicle
from .polyline import LatLon
from .scheduler import build_plan
from .settings import MAX_WAIT_S
from .world import World

Result = tuple[dict[str, Any], list[Event]]

NODE_ACTIONS = ("pickup_success", "dropoff_success", "no_show")
#: Fastest speed a driver app may report (m/s): faster than any road vehicle.
MAX_GPS_SPEED_MS = 150.0


def _check_point(name: str, lat: float, lon: float) -> LatLon:
    if not (-90.0 <= lat <= 90.0) or not (-180.0 <= lon <= 180.0):
        raise BadRequest(f"{name} is not a valid coordinate",
                         details=[{"loc": [name], "msg": "lat in [-90, 90], lon in [-180, 180]"}])
    return (float(lat), float(lon))


class Operations(World):
    """Shared node completion and demand change, and the operation entry points."""

    # ---- shared with the timers ------------------------------------------------------

    def complete(self, vehicle: Vehicle, node: RouteNode, booking: Booking, *, no_show: bool,
                 note: str | None, manual: bool = False) -> None:
        """The vehicle is at ``node``: pickup, dropoff or no-show."""
        head = vehicle.route[0] is node
        if manual:
            self.reanchor(vehicle)  # a driver app may report from anywhere: jump there
        self.drive(vehicle, node.pos)
        vehicle.anchor = node.pos
        vehicle.anchor_t = self.now + self.settings.dwell_s
        vehicle.route.remove(node)
        node.status = "completed"
        if no_show:
            self.set_status(booking, BookingStatus.NO_SHOW)
            vehicle.route = [n for n in vehicle.route if n.booking_id != booking.id]
            self.emitter.fail_to_board(self.now, vehicle, booking, node)
            self.route_changed(vehicle)
            return
        if node.node_type is NodeType.PICKUP:
            self.set_status(booking, BookingStatus.PICKED_UP)
            booking.picked_up_t = vehicle.anchor_t
            if vehicle.onboard:
                # Pooled: this rider and those on board share part of their rides.
                booking.shared = True
                for other in vehicle.onboard:
                    self.bookings[other].shared = True
            vehicle.onboard[booking.id] = booking.passengers
            self.emitter.node_status(self.now, vehicle, node, "pickup_success", note)
        else:
            self.set_status(booking, BookingStatus.COMPLETED)
            booking.dropped_off_t = self.now
            vehicle.onboard.pop(booking.id, None)
            self.emitter.node_status(self.now, vehicle, node, "dropoff_success", note)
        if manual:
            self.route_changed(vehicle, nodes_changed=not head, assignment=not head)
        else:
            self.rearm(vehicle)  # the remaining route keeps its times: nothing to publish

    def change_demand(self, booking: Booking, passengers: int) -> bool:
        """demand_modification at both nodes, if the new count fits the vehicle's route."""
        if passengers < 1 or passengers == booking.passengers or booking.vehicle_id is None:
            return False
        vehicle = self.vehicles[booking.vehicle_id]
        plan = build_plan(vehicle, vehicle.route, self.bookings, self.travel,
                          self.settings.dwell_s, {booking.id: passengers})
        if any(load > vehicle.capacity for load in plan.load_after):
            return False
        booking.passengers = passengers
        self.rearm(vehicle)
        for node in (booking.pickup_node, booking.dropoff_node):
            assert node is not None
            self.emitter.demand_modification(self.now, vehicle, node, passengers)
        return True

    # ---- views -------------------------------------------------------------------------

    def booking_view(self, booking: Booking) -> dict[str, Any]:
        body = booking.to_dict(self.emitter.ts(booking.requested_t))
        body.update(status=booking.status.value, vehicle_id=booking.vehicle_id,
                    offer_id=booking.offer_id,
                    pickup_node_id=booking.pickup_node.id if booking.pickup_node else None,
                    dropoff_node_id=booking.dropoff_node.id if booking.dropoff_node else None)
        return body

    def offer_view(self, offer: Offer) -> dict[str, Any]:
        return {"id": offer.id, "uid": offer.uid, "booking_id": offer.booking_id,
                "vehicle_id": offer.vehicle_id, "status": offer.status.value,
                "estimated_pickup_time": self.emitter.ts(offer.estimated_pickup_t),
                "expires_ts": self.emitter.ts(offer.expires_t)}

    def vehicle_view(self, vehicle: Vehicle) -> dict[str, Any]:
        pos, _, _ = self.position(vehicle)
        return {"id": vehicle.id, "agent_id": vehicle.uid, "enabled": vehicle.enabled,
                "status": vehicle.status, "lat": pos[0], "lon": pos[1],
                "route": [n.id for n in vehicle.route], "load": vehicle.load}

    # ---- lookups -----------------------------------------------------------------------

    def _retired(self, kind: str, ident: int) -> bool:
        """The run had a booking, offer or node of this id, retired since it ended (world.py
        ``retire``): ids are given in order, so it is one not held at or below the last."""
        return 0 < ident <= self._ids[kind]

    def _booking(self, booking_id: int) -> Booking:
        booking = self.bookings.get(booking_id)
        if booking is not None:
            return booking
        if self._retired("booking", booking_id):
            raise Conflict(f"booking {booking_id} has ended: only an offered or assigned "
                           "booking can be changed", code="invalid_state")
        raise NotFound(f"no booking {booking_id} in this simulation")

    def _offer(self, offer_id: int) -> Offer:
        offer = self.offers.get(offer_id)
        if offer is None and self._retired("offer", offer_id):
            raise Conflict(f"offer {offer_id} is no longer pending (its booking has ended)",
                           code="invalid_state")
        if offer is None:
            raise NotFound(f"no offer {offer_id} in this simulation")
        if offer.status is not OfferStatus.PENDING:
            raise Conflict(f"offer {offer_id} is {offer.status.value}, no longer pending",
                           code="invalid_state")
        return offer

    def _vehicle(self, vehicle_id: int) -> Vehicle:
        try:
            return self.vehicles[vehicle_id]
        except KeyError:
            raise NotFound(f"no vehicle {vehicle_id} in this simulation") from None

    # ---- entry points ------------------------------------------------------------------

    def create_booking(self, pickup_lat: float, pickup_lon: float, dropoff_lat: float,
                       dropoff_lon: float, passengers: int = 1,
                       max_wait_s: float | None = None) -> Result:
        """A rider app's booking: bookings, calc_started, then offers or no_offer.

        The offer waits for ``accept_offer``/``reject_offer`` until it expires.
        """
        pickup = _check_point("pickup", pickup_lat, pickup_lon)
        dropoff = _check_point("dropoff", dropoff_lat, dropoff_lon)
        if not 1 <= passengers <= 100:
            raise BadRequest("passengers must be between 1 and 100",
                             details=[{"loc": ["passengers"], "msg": "1..100"}])
        wait = self.settings.max_wait_s if max_wait_s is None else max_wait_s
        if not 0 < wait <= MAX_WAIT_S:
            raise BadRequest(f"max_wait_s must be > 0 and <= {MAX_WAIT_S:g}",
                             details=[{"loc": ["max_wait_s"]}])
        booking = self.new_booking(pickup, dropoff, passengers, wait, auto=False)
        offer = self.offers.get(booking.offer_id) if booking.offer_id else None
        body = {"booking": self.booking_view(booking),
                "offer": self.offer_view(offer) if offer else None}
        return body, self.emitter.drain()

    def cancel_booking(self, booking_id: int) -> Result:
        """bookings_cancellation, and a new assignment for the vehicle that lost it."""
        booking = self._booking(booking_id)
        if booking.status not in (BookingStatus.OFFERED, BookingStatus.ASSIGNED):
            raise Conflict(f"booking {booking_id} is {booking.status.value}: only an offered "
                           "or assigned booking can be cancelled", code="invalid_state")
        self.cancel(booking, "operator")
        return {"booking": self.booking_view(booking)}, self.emitter.drain()

    def accept_offer(self, offer_id: int) -> Result:
        """offer_accepted, then assignment and vehicle_state_changed."""
        offer = self._offer(offer_id)
        self.accept(offer, "rider")
        booking = self.bookings[offer.booking_id]
        return ({"offer": self.offer_view(offer), "booking": self.booking_view(booking)},
                self.emitter.drain())

    def reject_offer(self, offer_id: int) -> Result:
        """offer_rejected."""
        offer = self._offer(offer_id)
        self.reject(offer, OfferStatus.REJECTED, "rider")
        return {"offer": self.offer_view(offer)}, self.emitter.drain()

    def set_vehicle_enabled(self, vehicle_id: int, enabled: bool) -> Result:
        """vehicle_use; disabling hands the vehicle's waiting bookings to others."""
        vehicle = self._vehicle(vehicle_id)
        if vehicle.enabled == enabled:
            state = "enabled" if enabled else "disabled"
            raise Conflict(f"vehicle {vehicle_id} is already {state}", code="invalid_state")
        self.on_break.discard(vehicle_id)
        self.set_enabled(vehicle, enabled, "operator")
        return {"vehicle": self.vehicle_view(vehicle)}, self.emitter.drain()

    def push_position(self, vehicle_id: int, lat: float, lon: float,
                      bearing: float | None = None, speed: float | None = None) -> Result:
        """A driver app's GPS fix: vehicle_state_changed (the path from here), gps_data."""
        vehicle = self._vehicle(vehicle_id)
        pos = _check_point("position", lat, lon)
        if bearing is not None and not 0.0 <= bearing < 360.0:
            raise BadRequest("bearing must be in [0, 360)", details=[{"loc": ["bearing"]}])
        if speed is not None and not 0 <= speed <= MAX_GPS_SPEED_MS:
            raise BadRequest(f"speed must be >= 0 and <= {MAX_GPS_SPEED_MS:g} m/s",
                             details=[{"loc": ["speed"]}])
        self.reanchor(vehicle)
        self.drive(vehicle, pos)
        vehicle.anchor = pos
        vehicle.anchor_t = self.now
        self.route_changed(vehicle, nodes_changed=False, assignment=False)
        _, heading, moving = self.position(vehicle)
        self.emitter.gps(self.now, vehicle, pos, heading if bearing is None else bearing,
                         moving if speed is None else speed)
        return {"vehicle": self.vehicle_view(vehicle)}, self.emitter.drain()

    def node_status(self, node_id: int, action: str, vehicle_id: int | None = None,
                    note: str | None = None) -> Result:
        """A driver app at a node: node_status (pickup_success, dropoff_success) or
        fail_to_board (no_show); the vehicle is taken to be at the node."""
        if action not in NODE_ACTIONS:
            raise BadRequest(f"action must be one of {', '.join(NODE_ACTIONS)}",
                             details=[{"loc": ["action"], "msg": f"got {action!r}"}])
        node = self.nodes.get(node_id)
        if node is None and self._retired("node", node_id):
            raise Conflict(f"node {node_id} is not on a vehicle's route (its booking has "
                           "ended)", code="invalid_state")
        if node is None:
            raise NotFound(f"no node {node_id} in this simulation")
        booking = self.bookings[node.booking_id]
        owner = booking.vehicle_id
        vehicle = self.vehicles.get(owner) if owner is not None else None
        if vehicle is None or node not in vehicle.route:
            raise Conflict(f"node {node_id} is not on a vehicle's route (it is {node.status})",
                           code="invalid_state")
        if vehicle_id is not None and vehicle_id != vehicle.id:
            raise Conflict(f"node {node_id} is on vehicle {vehicle.id}'s route, not on "
                           f"vehicle {vehicle_id}'s", code="invalid_state")
        expected = "pickup" if node.node_type is NodeType.PICKUP else "dropoff"
        if action == "no_show" and expected != "pickup":
            raise BadRequest("no_show applies to a pickup node",
                             details=[{"loc": ["action"], "msg": "node is a dropoff"}])
        if action != "no_show" and not action.startswith(expected):
            raise BadRequest(f"node {node_id} is a {expected} node; {action} does not apply",
                             details=[{"loc": ["action"]}])
        if expected == "dropoff" and booking.status is not BookingStatus.PICKED_UP:
            raise Conflict(f"booking {booking.id} has not been picked up yet",
                           code="invalid_state")
        self.complete(vehicle, node, booking, no_show=action == "no_show", note=note,
                      manual=True)
        return ({"booking": self.booking_view(booking), "vehicle": self.vehicle_view(vehicle)},
                self.emitter.drain())
