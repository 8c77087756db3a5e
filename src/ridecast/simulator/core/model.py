"""The simulated world: vehicles, bookings, offers and the route nodes that join them.

Plain mutable dataclasses with no behaviour beyond a few derived properties: the engine owns
every state change, the scheduler reads them. Times are simulated seconds since the run's
start (floats); the engine turns them into ISO 8601 timestamps when it writes an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .polyline import LatLon


class NodeType(StrEnum):
    """The two kinds of stop on a route."""

    PICKUP = "pickup"
    DROPOFF = "dropoff"


class BookingStatus(StrEnum):
    """Where a booking is in its life."""

    REQUESTED = "requested"
    OFFERED = "offered"
    NO_OFFER = "no_offer"
    REJECTED = "rejected"
    ASSIGNED = "assigned"
    PICKED_UP = "picked_up"
    COMPLETED = "completed"
    NO_SHOW = "no_show"
    CANCELLED = "cancelled"


OPEN_BOOKING = frozenset({BookingStatus.OFFERED, BookingStatus.ASSIGNED})
"""A booking in these states can still be cancelled."""


class OfferStatus(StrEnum):
    """An offer waits for the rider's answer until it is accepted, rejected or expires."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    EXPIRED = "expired"
    VOID = "void"


@dataclass(slots=True, eq=False)
class RouteNode:
    """A pickup or dropoff stop of one booking; its id is the node id of the interface."""

    id: int
    uid: str
    booking_id: int
    node_type: NodeType
    pos: LatLon
    status: str = "assigned"
    scheduled_t: float | None = None  # planned arrival when the route was assigned

    def to_dict(self, passengers: int) -> dict[str, Any]:
        """The Node object of ``assignment``, with the passenger count as an extra field."""
        return {
            "id": self.id,
            "uid": self.uid,
            "lat": self.pos[0],
            "lon": self.pos[1],
            "node_type": self.node_type.value,
            "status": self.status,
            "booking_id": self.booking_id,
            "demand": {"passenger": passengers},
        }


@dataclass(slots=True, eq=False)
class Booking:
    """A rider's request, from creation to dropoff, no-show or cancellation."""

    id: int
    uid: str
    session_uid: str
    pickup: LatLon
    dropoff: LatLon
    passengers: int
    requested_t: float
    max_wait_s: float
    direct_s: float
    direct_m: float
    max_ride_s: float
    auto_respond: bool
    status: BookingStatus = BookingStatus.REQUESTED
    pickup_node: RouteNode | None = None
    dropoff_node: RouteNode | None = None
    vehicle_id: int | None = None
    offer_id: int | None = None
    picked_up_t: float | None = None  # departure from the pickup node
    dropped_off_t: float | None = None
    cancel_reason: str | None = None  # rider, operator, no_vehicle, vehicle_disabled
    shared: bool = False  # another booking was on board during part of this one's ride

    @property
    def latest_pickup_t(self) -> float:
        return self.requested_t + self.max_wait_s

    def to_dict(self, ts: str) -> dict[str, Any]:
        """The Booking object of ``bookings``: the four fields shown, and ours as extras."""
        return {
            "id": self.id,
            "uid": self.uid,
            "pickup_lat": self.pickup[0],
            "pickup_lon": self.pickup[1],
            "dropoff_lat": self.dropoff[0],
            "dropoff_lon": self.dropoff[1],
            "passengers": self.passengers,
            "requested_ts": ts,
            "max_wait_s": self.max_wait_s,
        }


@dataclass(slots=True, eq=False)
class Offer:
    """A proposed vehicle and pickup time for a booking."""

    id: int
    uid: str
    booking_id: int
    vehicle_id: int
    estimated_pickup_t: float
    expires_t: float
    status: OfferStatus = OfferStatus.PENDING
    ride_s: float = 0.0  # planned ride (pickup departure to dropoff arrival) when offered


@dataclass(slots=True, eq=False)
class Vehicle:
    """A vehicle: it left ``anchor`` at ``anchor_t`` and drives its route in order.

    Planned arrival times follow from (anchor, anchor_t, route) alone, so they stay valid while
    the vehicle moves; the engine re-anchors only when the route or the position changes.
    """

    id: int
    uid: str
    capacity: int
    anchor: LatLon
    anchor_t: float = 0.0
    enabled: bool = True
    route: list[RouteNode] = field(default_factory=list)
    onboard: dict[int, int] = field(default_factory=dict)  # booking id -> passengers
    version: int = 0  # bumped on every route or anchor change: stale timers are ignored
    gps_running: bool = False
    vehicle_m: float = 0.0
    empty_m: float = 0.0
    passenger_m: float = 0.0
    target: LatLon | None = None  # rebalancing: an idle vehicle driving here, empty
    rebalance_m: float = 0.0  # driven towards a rebalancing target
    busy_s: float = 0.0  # time with a route (stops to make), spans ended so far
    busy_since: float | None = None  # start of the span with a route under way

    @property
    def heading_to(self) -> LatLon | None:
        """Where the vehicle is driving from its anchor: its next stop, or its rebalancing
        target, or nowhere."""
        return self.route[0].pos if self.route else self.target

    @property
    def load(self) -> int:
        return sum(self.onboard.values())

    @property
    def status(self) -> str:
        if not self.enabled:
            return "disabled"
        return "driving" if self.route else "idle"
