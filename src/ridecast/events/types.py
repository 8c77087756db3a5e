"""Event type names and agent types: the one home of these strings."""

from __future__ import annotations

from enum import StrEnum


class MessageType(StrEnum):
    """The 18 message types of the interface's Events table."""

    BOOKINGS = "bookings"
    BOOKINGS_CANCELLATION = "bookings_cancellation"
    FAIL_TO_BOARD = "fail_to_board"
    OFFERS = "offers"
    OFFER_ACCEPTED = "offer_accepted"
    OFFER_REJECTED = "offer_rejected"
    NO_OFFER = "no_offer"
    CALC_STARTED = "calc_started"
    SCHEDULER_RESULT = "scheduler_result"
    ASSIGNMENT = "assignment"
    VEHICLE_ARRIVAL = "vehicle_arrival"
    VEHICLE_ARRIVAL_GROUPED = "vehicle_arrival_grouped"
    NODE_STATUS = "node_status"
    VEHICLE_STATE_CHANGED = "vehicle_state_changed"
    VEHICLE_STATES = "vehicle_states"
    GPS_DATA = "gps_data"
    VEHICLE_USE = "vehicle_use"
    DEMAND_MODIFICATION = "demand_modification"


class AgentType(StrEnum):
    """agent_type values that occur in the interface (others are accepted as strings)."""

    SCHEDULER = "scheduler"
    VEHICLE = "vehicle"
    EVENT_PUBLISHER = "event_publisher"
    VEHICLE_GROUP = "vehicle_group"


ALL_TYPES: frozenset[str] = frozenset(t.value for t in MessageType)

# The interface's own websocket type list; docs/design.md decision 4 opens all 18 on paths.
SPEC_WEBSOCKET_TYPES: tuple[str, ...] = (
    "assignment", "bookings", "bookings_cancellation", "fail_to_board", "gps_data", "offers",
    "no_offer", "node_status", "offer_accepted", "offer_rejected", "scheduler_result",
    "vehicle_states", "vehicle_use",
)
WEBSOCKET_TYPES: frozenset[str] = ALL_TYPES

# The filter values the interface shows; docs/design.md decision 6 accepts all 18.
SPEC_WEBHOOK_FILTER_TYPES: tuple[str, ...] = (
    "assignment", "bookings", "bookings_cancellation", "fail_to_board", "offers", "no_offer",
    "node_status", "offer_accepted", "offer_rejected", "vehicle_arrival",
    "vehicle_state_changed",
)
WEBHOOK_FILTER_TYPES: frozenset[str] = ALL_TYPES

# agent_type and transmit_to_websocket as the interface's Events table shows them; the
# simulator publishes with these values.
PRODUCER_DEFAULTS: dict[MessageType, tuple[AgentType, bool]] = {
    MessageType.BOOKINGS: (AgentType.EVENT_PUBLISHER, True),
    MessageType.BOOKINGS_CANCELLATION: (AgentType.EVENT_PUBLISHER, True),
    MessageType.FAIL_TO_BOARD: (AgentType.VEHICLE, True),
    MessageType.OFFERS: (AgentType.EVENT_PUBLISHER, False),
    MessageType.OFFER_ACCEPTED: (AgentType.EVENT_PUBLISHER, True),
    MessageType.OFFER_REJECTED: (AgentType.EVENT_PUBLISHER, True),
    MessageType.NO_OFFER: (AgentType.SCHEDULER, True),
    MessageType.CALC_STARTED: (AgentType.SCHEDULER, False),
    MessageType.SCHEDULER_RESULT: (AgentType.SCHEDULER, False),
    MessageType.ASSIGNMENT: (AgentType.VEHICLE_GROUP, True),
    MessageType.VEHICLE_ARRIVAL: (AgentType.VEHICLE, False),
    MessageType.VEHICLE_ARRIVAL_GROUPED: (AgentType.VEHICLE, False),
    MessageType.NODE_STATUS: (AgentType.VEHICLE, False),
    MessageType.VEHICLE_STATE_CHANGED: (AgentType.VEHICLE, False),
    MessageType.VEHICLE_STATES: (AgentType.VEHICLE, False),
    MessageType.GPS_DATA: (AgentType.VEHICLE, True),
    MessageType.VEHICLE_USE: (AgentType.VEHICLE, True),
    MessageType.DEMAND_MODIFICATION: (AgentType.VEHICLE_GROUP, True),
}
