"""The ``data`` payload of each of the 18 message types, and the objects inside them.

Field names and types are exactly those of the interface's tables. Every model keeps
unknown extra fields (the interface shows only part of some objects), so nothing a
producer sends is dropped.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .fields import Bool, Int, Number, Str, Timestamp, UUIDStr


class Payload(BaseModel):
    """Base of every payload and nested object: extra fields are kept, types are strict."""

    model_config = ConfigDict(extra="allow", frozen=False)


# ---- objects inside payloads ---------------------------------------------------------


class Booking(Payload):
    """A booking in ``bookings``; further fields are kept as sent."""

    id: Int
    uid: UUIDStr
    pickup_lat: Number
    pickup_lon: Number


class Offer(Payload):
    """An offer in ``offers``."""

    id: Int
    uid: UUIDStr
    service_session_id: UUIDStr
    booking_id: UUIDStr
    vehicle_id: UUIDStr
    offer_pickup_location_lat: Number
    offer_pickup_location_lon: Number
    estimated_pickup_time: Timestamp
    demand: dict[str, Int]


class Node(Payload):
    """A pickup or dropoff node of a route, in ``assignment``."""

    id: Int
    uid: UUIDStr
    lat: Number
    lon: Number
    node_type: Str
    status: Str
    booking_id: Int


class Edge(Payload):
    """The leg between two nodes, with its geometry as a precision-5 encoded polyline."""

    from_node_id: Int
    to_node_id: Int
    polyline5: Str
    edge_type: Str


class VehicleState(Payload):
    """One vehicle in a ``vehicle_states`` snapshot."""

    id: Int
    lat: Number
    lon: Number
    status: Str
    current_route: list[Any]


class Ticket(Payload):
    """A ticket count in ``demand_modification``."""

    demand: Int
    ticket_type: Str


class Arrival(Payload):
    """One arrival estimate in ``vehicle_arrival_grouped``."""

    vehicle_id: Int
    node_id: Int
    estimated_earliest_arrival_ts: Timestamp


class DriverNote(Payload):
    """A driver's note attached to a node action."""

    additional_note: Str


class ActionDataData(Payload):
    """The free part of a node action; may hold a driver note."""

    driver_note: DriverNote | None = None


class ActionData(Payload):
    """What the driver did at a node (``pickup_success`` seen)."""

    action_type: Str
    data: ActionDataData


class VehicleUpdate(Payload):
    """The changed parts of a vehicle in ``vehicle_state_changed``."""

    path: Str


# ---- payloads, one per message type --------------------------------------------------


class BookingsData(Payload):
    """``bookings``: new bookings created."""

    bookings: list[Booking]


class BookingsCancellationData(Payload):
    """``bookings_cancellation``: bookings cancelled."""

    booking_ids: list[Int]


class FailToBoardData(Payload):
    """``fail_to_board``: a passenger did not board (no-show)."""

    booking_ids: list[Int]
    booking_uids: list[UUIDStr]


class OffersData(Payload):
    """``offers``: offers generated for bookings."""

    offer_ids: list[Int]
    offers: list[Offer]


class OfferAcceptedData(Payload):
    """``offer_accepted``: a user accepted an offer."""

    offer_id: Int


class OfferRejectedData(Payload):
    """``offer_rejected``: an offer was rejected or expired."""

    offer_id: Int


class NoOfferData(Payload):
    """``no_offer``: the scheduler found no suitable offer for a booking."""

    booking_ids: list[Int]
    booking_uids: list[UUIDStr]


class CalcStartedData(Payload):
    """``calc_started``: the scheduler began a calculation for a batch of bookings."""

    booking_ids: list[Int]
    booking_uids: list[Str]


class SchedulerResultData(Payload):
    """``scheduler_result``: a calculation's result before assignment."""

    nodes: list[Any]
    vehicle_id: Int


class AssignmentData(Payload):
    """``assignment``: the route a vehicle is to drive."""

    vehicle_id: Int
    vehicle_agent_id: UUIDStr
    nodes: list[Node]
    edges: list[Edge]


class VehicleArrivalData(Payload):
    """``vehicle_arrival``: ETA of a vehicle at an upcoming node."""

    booking_id: Int
    booking_uid: Str
    node_id: Int
    node_uid: Str
    node_type: Str
    estimated_earliest_arrival_ts: Timestamp
    estimated_scheduled_ts: Timestamp
    scheduled_ts: Timestamp
    vehicle_id: Int


class VehicleArrivalGroupedData(Payload):
    """``vehicle_arrival_grouped``: a vehicle's arrival estimates together."""

    vehicle_id: Int
    vehicle_agent_id: Str
    arrivals: list[Arrival]


class NodeStatusData(Payload):
    """``node_status``: a vehicle completed a node."""

    node_uid: Str
    status: Str
    vehicle_id: Int
    node_type: Str
    action_data: ActionData


class VehicleStateChangedData(Payload):
    """``vehicle_state_changed``: a vehicle's route or status changed."""

    vehicle_id: Int
    instance_changed: Bool
    nodes_changed: Bool
    update: VehicleUpdate


class VehicleStatesData(Payload):
    """``vehicle_states``: a snapshot of vehicles' internal state."""

    vehicle_states: list[VehicleState]


class GpsData(Payload):
    """``gps_data``: a raw location update."""

    vehicle_event: Literal["gps_data"]
    vehicle_id: Int
    lat: Number
    lon: Number
    bearing: Number
    speed: Number
    device_ts: Timestamp


class VehicleUseData(Payload):
    """``vehicle_use``: a vehicle was enabled or disabled."""

    vehicle_id: Int
    action: Str


class DemandModificationData(Payload):
    """``demand_modification``: the demand at a node of a vehicle changed."""

    vehicle_id: Int
    node_id: Int
    tickets: list[Ticket]
