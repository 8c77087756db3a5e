"""Builds the envelope dicts the simulator publishes, one method per message type.

``agent_type`` and ``transmit_to_websocket`` come from ``PRODUCER_DEFAULTS`` (the spec's
table); ``current_sim_ts`` is the simulated clock as ISO 8601 with an offset. ``server_ts`` is
left out: the ingest path stamps it when it processes the event (the gps_data shape omits it
anyway). Ids are integers except in offers, whose booking_id and vehicle_id are UUID strings,
as the interface types them.
"""

from __future__ import annotations

import math
from typing import Any

from ...events.types import PRODUCER_DEFAULTS, MessageType
from ...isotime import second_prefix
from .model import Booking, Offer, RouteNode, Vehicle
from .polyline import LatLon, dedupe, encode

Event = dict[str, Any]

# (message_type, agent_type, transmit_to_websocket) as plain values by message type: an
# enum's ``.value`` is a descriptor call, and every event needs three of them.
_HEADERS: dict[MessageType, tuple[str, str, bool]] = {
    mtype: (mtype.value, agent_type.value, transmit)
    for mtype, (agent_type, transmit) in PRODUCER_DEFAULTS.items()
}

_GPS, _GPS_AGENT, _GPS_TRANSMIT = _HEADERS[MessageType.GPS_DATA]

#: Formatted timestamps an emitter remembers.
TS_MEMO = 65_536


class Emitter:
    """Collects events in order; ``drain()`` hands them over."""

    def __init__(self, simulation_id: int, epoch: float) -> None:
        self.simulation_id = simulation_id
        self.epoch = epoch
        self._out: list[Event] = []
        self._ts_memo: dict[float, str] = {}
        self.counts: dict[str, int] = {}

    def ts(self, t: float) -> str:
        """ISO 8601 (milliseconds, UTC offset) of simulated time ``t``; remembered (up to
        ``TS_MEMO`` times, then forgotten at once): the arrival tracker writes the same
        planned times every round, and each estimate twice."""
        text = self._ts_memo.get(t)
        if text is None:
            memo = self._ts_memo
            if len(memo) >= TS_MEMO:
                memo.clear()
            text = memo[t] = self._format(self.epoch + t)
        return text

    def _format(self, timestamp: float) -> str:
        """``datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")``,
        character for character, with the date and time of day formatted once per second:
        the microseconds are rounded as ``fromtimestamp`` rounds them (to nearest, ties to
        even) and then cut to milliseconds, as ``isoformat`` cuts them."""
        fraction, whole = math.modf(timestamp)
        micros = round(fraction * 1e6)
        second = int(whole)
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        elif micros < 0:
            second, micros = second - 1, micros + 1_000_000
        return f"{second_prefix(second)}.{micros // 1000:03d}+00:00"

    def drain(self) -> list[Event]:
        out, self._out = self._out, []
        return out

    def emit(self, mtype: MessageType, t: float, data: dict[str, Any],
             agent_id: str | None = None) -> None:
        name, agent_type, transmit = _HEADERS[mtype]
        event: Event = {
            "simulation_id": self.simulation_id,
            "agent_type": agent_type,
            "message_type": name,
            "data": data,
            "current_sim_ts": self.ts(t),
            "transmit_to_websocket": transmit,
        }
        if agent_id is not None:
            event["agent_id"] = agent_id
        self._out.append(event)
        self.counts[name] = self.counts.get(name, 0) + 1

    # ---- one builder per lifecycle step ---------------------------------------------

    def bookings(self, t: float, booking: Booking) -> None:
        self.emit(MessageType.BOOKINGS, t,
                  {"bookings": [booking.to_dict(self.ts(booking.requested_t))]})

    def calc_started(self, t: float, bookings: list[Booking]) -> None:
        self.emit(MessageType.CALC_STARTED, t, {
            "booking_ids": [b.id for b in bookings], "booking_uids": [b.uid for b in bookings]})

    def scheduler_result(self, t: float, vehicle: Vehicle, nodes: list[dict[str, Any]],
                         cost_s: float) -> None:
        self.emit(MessageType.SCHEDULER_RESULT, t,
                  {"nodes": nodes, "vehicle_id": vehicle.id, "cost_s": round(cost_s, 3)})

    def offers(self, t: float, offer: Offer, booking: Booking, vehicle: Vehicle) -> None:
        body = {
            "id": offer.id,
            "uid": offer.uid,
            "service_session_id": booking.session_uid,
            "booking_id": booking.uid,
            "vehicle_id": vehicle.uid,
            "offer_pickup_location_lat": booking.pickup[0],
            "offer_pickup_location_lon": booking.pickup[1],
            "estimated_pickup_time": self.ts(offer.estimated_pickup_t),
            "demand": {"passenger": booking.passengers},
            "expires_ts": self.ts(offer.expires_t),
        }
        self.emit(MessageType.OFFERS, t, {"offer_ids": [offer.id], "offers": [body]})

    def no_offer(self, t: float, booking: Booking) -> None:
        self.emit(MessageType.NO_OFFER, t, {"booking_ids": [booking.id],
                                            "booking_uids": [booking.uid]})

    def offer_answer(self, t: float, offer: Offer, accepted: bool, reason: str) -> None:
        mtype = MessageType.OFFER_ACCEPTED if accepted else MessageType.OFFER_REJECTED
        self.emit(mtype, t, {"offer_id": offer.id, "reason": reason})

    def cancellation(self, t: float, booking: Booking, reason: str) -> None:
        self.emit(MessageType.BOOKINGS_CANCELLATION, t,
                  {"booking_ids": [booking.id], "reason": reason})

    def assignment(self, t: float, vehicle: Vehicle, nodes: list[dict[str, Any]],
                   edges: list[dict[str, Any]]) -> None:
        self.emit(MessageType.ASSIGNMENT, t, {"vehicle_id": vehicle.id,
                                              "vehicle_agent_id": vehicle.uid,
                                              "nodes": nodes, "edges": edges}, vehicle.uid)

    def state_changed(self, t: float, vehicle: Vehicle, path: list[LatLon],
                      nodes_changed: bool, instance_changed: bool) -> None:
        self.emit(MessageType.VEHICLE_STATE_CHANGED, t, {
            "vehicle_id": vehicle.id,
            "instance_changed": instance_changed,
            "nodes_changed": nodes_changed,
            "update": {"path": encode(dedupe(path)), "status": vehicle.status},
        }, vehicle.uid)

    def node_status(self, t: float, vehicle: Vehicle, node: RouteNode, action: str,
                    note: str | None) -> None:
        extra: dict[str, Any] = {} if note is None else {"driver_note": {"additional_note": note}}
        self.emit(MessageType.NODE_STATUS, t, {
            "node_uid": node.uid,
            "node_id": node.id,
            "booking_id": node.booking_id,
            "status": "completed",
            "vehicle_id": vehicle.id,
            "node_type": node.node_type.value,
            "action_data": {"action_type": action, "data": extra},
        }, vehicle.uid)

    def fail_to_board(self, t: float, vehicle: Vehicle, booking: Booking,
                      node: RouteNode) -> None:
        self.emit(MessageType.FAIL_TO_BOARD, t, {
            "booking_ids": [booking.id], "booking_uids": [booking.uid],
            "vehicle_id": vehicle.id, "node_id": node.id}, vehicle.uid)

    def demand_modification(self, t: float, vehicle: Vehicle, node: RouteNode,
                            passengers: int) -> None:
        self.emit(MessageType.DEMAND_MODIFICATION, t, {
            "vehicle_id": vehicle.id, "node_id": node.id, "booking_id": node.booking_id,
            "tickets": [{"demand": passengers, "ticket_type": "passenger"}]}, vehicle.uid)

    def vehicle_use(self, t: float, vehicle: Vehicle, reason: str) -> None:
        self.emit(MessageType.VEHICLE_USE, t, {
            "vehicle_id": vehicle.id, "action": "enabled" if vehicle.enabled else "disabled",
            "reason": reason}, vehicle.uid)

    def gps(self, t: float, vehicle: Vehicle, pos: LatLon, bearing: float,
            speed: float) -> None:
        """``emit`` of gps_data written out (most events are these): the same keys in the
        same order."""
        ts = self.ts(t)
        self._out.append({
            "simulation_id": self.simulation_id,
            "agent_type": _GPS_AGENT,
            "message_type": _GPS,
            "data": {"vehicle_event": "gps_data", "vehicle_id": vehicle.id,
                     "lat": round(pos[0], 7), "lon": round(pos[1], 7),
                     "bearing": round(bearing, 1), "speed": round(speed, 2),
                     "device_ts": ts},
            "current_sim_ts": ts,
            "transmit_to_websocket": _GPS_TRANSMIT,
            "agent_id": vehicle.uid,
        })
        counts = self.counts
        counts[_GPS] = counts.get(_GPS, 0) + 1

    def vehicle_states(self, t: float, states: list[dict[str, Any]]) -> None:
        self.emit(MessageType.VEHICLE_STATES, t, {"vehicle_states": states})

    def arrival(self, t: float, vehicle: Vehicle, booking: Booking, node: RouteNode,
                earliest_t: float, planned_t: float) -> None:
        self.emit(MessageType.VEHICLE_ARRIVAL, t, {
            "booking_id": booking.id, "booking_uid": booking.uid,
            "node_id": node.id, "node_uid": node.uid, "node_type": node.node_type.value,
            "estimated_earliest_arrival_ts": self.ts(earliest_t),
            "estimated_scheduled_ts": self.ts(planned_t),
            "scheduled_ts": self.ts(node.scheduled_t if node.scheduled_t is not None
                                    else planned_t),
            "vehicle_id": vehicle.id}, vehicle.uid)

    def arrival_grouped(self, t: float, vehicle: Vehicle,
                        arrivals: list[tuple[int, float]]) -> None:
        self.emit(MessageType.VEHICLE_ARRIVAL_GROUPED, t, {
            "vehicle_id": vehicle.id, "vehicle_agent_id": vehicle.uid,
            "arrivals": [{"vehicle_id": vehicle.id, "node_id": node_id,
                          "estimated_earliest_arrival_ts": self.ts(at)}
                         for node_id, at in arrivals]}, vehicle.uid)
