"""The message envelope, one event model per message type, and their union.

``Event`` is a discriminated union on ``message_type``: validating a dict picks the model of
its type, so ``data`` is checked against the right payload and an unknown type is a clear
error. The envelope keeps unknown extra fields, like the payloads.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from . import payloads as p
from .fields import Bool, Int, Str, Timestamp, UUIDStr
from .types import MessageType


class Envelope(BaseModel):
    """Fields common to every event, as the interface's envelope table gives them.

    ``event_id`` is ridecast's cursor: set on stored events (websocket frames, history), absent
    from webhook bodies and from what producers send.
    """

    model_config = ConfigDict(extra="allow")

    simulation_id: Int
    agent_type: Str
    message_type: str
    agent_id: UUIDStr | None = None
    data: p.Payload
    current_sim_ts: Timestamp
    server_ts: Timestamp
    transmit_to_websocket: Bool
    event_id: str | None = Field(
        None, description="ridecast's opaque cursor (websocket frames and history only)."
    )


class BookingsEvent(Envelope):
    """New bookings created."""

    message_type: Literal["bookings"]
    data: p.BookingsData


class BookingsCancellationEvent(Envelope):
    """Bookings cancelled."""

    message_type: Literal["bookings_cancellation"]
    data: p.BookingsCancellationData


class FailToBoardEvent(Envelope):
    """A passenger failed to board (no-show)."""

    message_type: Literal["fail_to_board"]
    data: p.FailToBoardData


class OffersEvent(Envelope):
    """Offers generated for bookings."""

    message_type: Literal["offers"]
    data: p.OffersData


class OfferAcceptedEvent(Envelope):
    """A user accepted an offer."""

    message_type: Literal["offer_accepted"]
    data: p.OfferAcceptedData


class OfferRejectedEvent(Envelope):
    """An offer was rejected or expired."""

    message_type: Literal["offer_rejected"]
    data: p.OfferRejectedData


class NoOfferEvent(Envelope):
    """The scheduler found no suitable offer for a booking."""

    message_type: Literal["no_offer"]
    data: p.NoOfferData


class CalcStartedEvent(Envelope):
    """The scheduler began a calculation for a batch of bookings."""

    message_type: Literal["calc_started"]
    data: p.CalcStartedData


class SchedulerResultEvent(Envelope):
    """A calculation's result before assignment (internal/debug)."""

    message_type: Literal["scheduler_result"]
    data: p.SchedulerResultData


class AssignmentEvent(Envelope):
    """Confirmed assignment of a route to a vehicle."""

    message_type: Literal["assignment"]
    data: p.AssignmentData


class VehicleArrivalEvent(Envelope):
    """ETA for an upcoming node (performance tracker)."""

    message_type: Literal["vehicle_arrival"]
    data: p.VehicleArrivalData


class VehicleArrivalGroupedEvent(Envelope):
    """Arrival estimates grouped by vehicle (performance tracker)."""

    message_type: Literal["vehicle_arrival_grouped"]
    data: p.VehicleArrivalGroupedData


class NodeStatusEvent(Envelope):
    """A vehicle completed a node."""

    message_type: Literal["node_status"]
    data: p.NodeStatusData


class VehicleStateChangedEvent(Envelope):
    """A vehicle's route or status changed."""

    message_type: Literal["vehicle_state_changed"]
    data: p.VehicleStateChangedData


class VehicleStatesEvent(Envelope):
    """Snapshot of vehicles' internal state."""

    message_type: Literal["vehicle_states"]
    data: p.VehicleStatesData


class GpsDataEvent(Envelope):
    """A raw location update; the only shape that may omit server_ts."""

    message_type: Literal["gps_data"]
    data: p.GpsData
    server_ts: Timestamp | None = None  # type: ignore[assignment]


class VehicleUseEvent(Envelope):
    """A vehicle was enabled or disabled."""

    message_type: Literal["vehicle_use"]
    data: p.VehicleUseData


class DemandModificationEvent(Envelope):
    """The demand at a node of a vehicle changed."""

    message_type: Literal["demand_modification"]
    data: p.DemandModificationData


EVENT_MODELS: dict[MessageType, type[Envelope]] = {
    MessageType.BOOKINGS: BookingsEvent,
    MessageType.BOOKINGS_CANCELLATION: BookingsCancellationEvent,
    MessageType.FAIL_TO_BOARD: FailToBoardEvent,
    MessageType.OFFERS: OffersEvent,
    MessageType.OFFER_ACCEPTED: OfferAcceptedEvent,
    MessageType.OFFER_REJECTED: OfferRejectedEvent,
    MessageType.NO_OFFER: NoOfferEvent,
    MessageType.CALC_STARTED: CalcStartedEvent,
    MessageType.SCHEDULER_RESULT: SchedulerResultEvent,
    MessageType.ASSIGNMENT: AssignmentEvent,
    MessageType.VEHICLE_ARRIVAL: VehicleArrivalEvent,
    MessageType.VEHICLE_ARRIVAL_GROUPED: VehicleArrivalGroupedEvent,
    MessageType.NODE_STATUS: NodeStatusEvent,
    MessageType.VEHICLE_STATE_CHANGED: VehicleStateChangedEvent,
    MessageType.VEHICLE_STATES: VehicleStatesEvent,
    MessageType.GPS_DATA: GpsDataEvent,
    MessageType.VEHICLE_USE: VehicleUseEvent,
    MessageType.DEMAND_MODIFICATION: DemandModificationEvent,
}
"""The event model of each message type."""

PAYLOAD_MODELS: dict[MessageType, type[p.Payload]] = {
    t: model.model_fields["data"].annotation for t, model in EVENT_MODELS.items()  # type: ignore[misc]
}
"""The ``data`` model of each message type."""

Event: TypeAlias = Annotated[
    Union[  # noqa: UP007 - a discriminated union needs the explicit Union
        BookingsEvent,
        BookingsCancellationEvent,
        FailToBoardEvent,
        OffersEvent,
        OfferAcceptedEvent,
        OfferRejectedEvent,
        NoOfferEvent,
        CalcStartedEvent,
        SchedulerResultEvent,
        AssignmentEvent,
        VehicleArrivalEvent,
        VehicleArrivalGroupedEvent,
        NodeStatusEvent,
        VehicleStateChangedEvent,
        VehicleStatesEvent,
        GpsDataEvent,
        VehicleUseEvent,
        DemandModificationEvent,
    ],
    Field(discriminator="message_type"),
]
"""Any event; validation dispatches on ``message_type``."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(obj: dict[str, Any]) -> Envelope:
    """Validate one event dict against the model of its ``message_type``.

    Raises ``pydantic.ValidationError``; an unknown type fails with error type
    ``union_tag_invalid``.
    """
    return EVENT_ADAPTER.validate_python(obj)


def parse_event_json(raw: bytes | str) -> Envelope:
    """Validate one event from JSON text (a websocket frame, a webhook body)."""
    return EVENT_ADAPTER.validate_json(raw)
