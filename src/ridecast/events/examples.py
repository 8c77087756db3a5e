"""One realistic example of each of the 18 events, as a producer would post it.

Used by the README's reference, the tests and the benchmarks. Each validates against its model.
"""

from __future__ import annotations

import copy
from typing import Any

from .types import PRODUCER_DEFAULTS, MessageType

_TS = "2026-11-22T08:15:00+01:00"
_VEHICLE_AGENT = "5f0c7a9e-3b1d-4e8a-9c2f-7d6b5a4e3c21"
_BOOKING_UID = "0b5d1f7e-6a8e-4c43-9e0a-1f2b3c4d5e6f"
_NODE_UID_PICKUP = "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"
_NODE_UID_DROPOFF = "d2e3f4a5-b6c7-4d8e-9f0a-1b2c3d4e5f60"

_DATA: dict[MessageType, dict[str, Any]] = {
    MessageType.BOOKINGS: {
        "bookings": [
            {"id": 4711, "uid": _BOOKING_UID, "pickup_lat": 52.520008, "pickup_lon": 13.404954,
             "dropoff_lat": 52.5096, "dropoff_lon": 13.3759, "passengers": 2}
        ]
    },
    MessageType.BOOKINGS_CANCELLATION: {"booking_ids": [4711]},
    MessageType.FAIL_TO_BOARD: {"booking_ids": [4711], "booking_uids": [_BOOKING_UID]},
    MessageType.OFFERS: {
        "offer_ids": [901],
        "offers": [
            {
                "id": 901,
                "uid": "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d",
                "service_session_id": "2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f",
                "booking_id": _BOOKING_UID,
                "vehicle_id": _VEHICLE_AGENT,
                "offer_pickup_location_lat": 52.52012,
                "offer_pickup_location_lon": 13.40501,
                "estimated_pickup_time": "2026-11-22T08:21:30+01:00",
                "demand": {"passenger": 2},
            }
        ],
    },
    MessageType.OFFER_ACCEPTED: {"offer_id": 901},
    MessageType.OFFER_REJECTED: {"offer_id": 902},
    MessageType.NO_OFFER: {"booking_ids": [4712], "booking_uids": [
        "1c6e2a8f-7b9d-4d54-8f1b-2a3c4d5e6f70"]},
    MessageType.CALC_STARTED: {"booking_ids": [4711], "booking_uids": [_BOOKING_UID]},
    MessageType.SCHEDULER_RESULT: {
        "vehicle_id": 12,
        "nodes": [
            {"id": 31, "node_type": "pickup", "booking_id": 4711},
            {"id": 32, "node_type": "dropoff", "booking_id": 4711},
        ],
    },
    MessageType.ASSIGNMENT: {
        "vehicle_id": 12,
        "vehicle_agent_id": _VEHICLE_AGENT,
        "nodes": [
            {"id": 31, "uid": _NODE_UID_PICKUP, "lat": 52.52012, "lon": 13.40501,
             "node_type": "pickup", "status": "assigned", "booking_id": 4711},
            {"id": 32, "uid": _NODE_UID_DROPOFF, "lat": 52.5096, "lon": 13.3759,
             "node_type": "dropoff", "status": "assigned", "booking_id": 4711},
        ],
        "edges": [
            {"from_node_id": 31, "to_node_id": 32, "polyline5": "wyp_IidypAv`A|tD",
             "edge_type": "between_nodes"}
        ],
    },
    MessageType.VEHICLE_ARRIVAL: {
        "booking_id": 4711,
        "booking_uid": _BOOKING_UID,
        "node_id": 31,
        "node_uid": _NODE_UID_PICKUP,
        "node_type": "pickup",
        "estimated_earliest_arrival_ts": "2026-11-22T08:20:10+01:00",
        "estimated_scheduled_ts": "2026-11-22T08:21:30+01:00",
        "scheduled_ts": "2026-11-22T08:21:30+01:00",
        "vehicle_id": 12,
    },
    MessageType.VEHICLE_ARRIVAL_GROUPED: {
        "vehicle_id": 12,
        "vehicle_agent_id": _VEHICLE_AGENT,
        "arrivals": [
            {"vehicle_id": 12, "node_id": 31,
             "estimated_earliest_arrival_ts": "2026-11-22T08:20:10+01:00"},
            {"vehicle_id": 12, "node_id": 32,
             "estimated_earliest_arrival_ts": "2026-11-22T08:31:45+01:00"},
        ],
    },
    MessageType.NODE_STATUS: {
        "node_uid": _NODE_UID_PICKUP,
        "status": "completed",
        "vehicle_id": 12,
        "node_type": "pickup",
        "action_data": {
            "action_type": "pickup_success",
            "data": {"driver_note": {"additional_note": "waited at the side entrance"}},
        },
    },
    MessageType.VEHICLE_STATE_CHANGED: {
        "vehicle_id": 12,
        "instance_changed": False,
        "nodes_changed": True,
        "update": {"path": "wyp_IidypAv`A|tD"},
    },
    MessageType.VEHICLE_STATES: {
        "vehicle_states": [
            {"id": 12, "lat": 52.5189, "lon": 13.4011, "status": "idle", "current_route": []}
        ]
    },
    MessageType.GPS_DATA: {
        "vehicle_event": "gps_data",
        "vehicle_id": 12,
        "lat": 52.51893,
        "lon": 13.40122,
        "bearing": 248.5,
        "speed": 8.3,
        "device_ts": "2026-11-22T08:14:59.250+01:00",
    },
    MessageType.VEHICLE_USE: {"vehicle_id": 12, "action": "disabled"},
    MessageType.DEMAND_MODIFICATION: {
        "vehicle_id": 12,
        "node_id": 31,
        "tickets": [{"demand": 3, "ticket_type": "passenger"}],
    },
}


def example_event(message_type: MessageType | str, simulation_id: int = 1) -> dict[str, Any]:
    """A fresh copy of the example envelope of ``message_type`` for ``simulation_id``."""
    kind = MessageType(message_type)
    agent_type, transmit = PRODUCER_DEFAULTS[kind]
    event: dict[str, Any] = {
        "simulation_id": simulation_id,
        "agent_type": agent_type.value,
        "message_type": kind.value,
        "agent_id": _VEHICLE_AGENT,
        "data": copy.deepcopy(_DATA[kind]),
        "current_sim_ts": _TS,
        "server_ts": "2026-11-22T08:15:00.412+01:00",
        "transmit_to_websocket": transmit,
    }
    if kind is MessageType.GPS_DATA:
        del event["server_ts"]  # the interface's gps_data shape omits it
    return event


def all_examples(simulation_id: int = 1) -> list[dict[str, Any]]:
    """One example of each type, in the interface's table order."""
    return [example_event(t, simulation_id) for t in MessageType]
