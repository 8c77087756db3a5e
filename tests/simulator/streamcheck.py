"""Invariants of a simulator event stream, checked on the events alone (no engine state)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ridecast.simulator.core.polyline import decode

Event = dict[str, Any]


def _t(ts: str) -> float:
    return datetime.fromisoformat(ts).timestamp()


def _metres(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """b - a in local metres (equirectangular; exact enough at city scale)."""
    return ((b[1] - a[1]) * 111_195.0 * math.cos(math.radians(a[0])),
            (b[0] - a[0]) * 111_195.0)


def distance_to_path(point: tuple[float, float], path: list[tuple[float, float]]) -> float:
    """Shortest distance in metres from ``point`` to the polyline ``path``."""
    best = math.inf
    if len(path) == 1:
        path = path * 2
    for a, b in itertools.pairwise(path):
        bx, by = _metres(a, b)
        px, py = _metres(a, point)
        seg2 = bx * bx + by * by
        f = 0.0 if seg2 == 0 else max(0.0, min(1.0, (px * bx + py * by) / seg2))
        best = min(best, math.hypot(px - f * bx, py - f * by))
    return best


@dataclass
class StreamCheck:
    """Feed events in order with ``feed``; ``finish`` checks what must hold at the end."""

    capacity: int
    speed_mps: float
    max_detour_factor: float
    dwell_s: float
    gps_tolerance_m: float = 15.0
    time_tolerance_s: float = 2.0
    errors: list[str] = field(default_factory=list)
    bookings: dict[int, dict[str, Any]] = field(default_factory=dict)
    by_uid: dict[str, int] = field(default_factory=dict)
    offers: dict[int, int] = field(default_factory=dict)  # offer id -> booking id
    accepted: set[int] = field(default_factory=set)
    picked: dict[int, float] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    cancelled: set[int] = field(default_factory=set)
    onboard: dict[int, set[int]] = field(default_factory=dict)
    routes: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    paths: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    gps_checked: int = 0
    last_t: float = -math.inf

    def _err(self, message: str) -> None:
        if len(self.errors) < 50:
            self.errors.append(message)

    def _check_route(self, vehicle_id: int, where: str) -> None:
        onboard = self.onboard.setdefault(vehicle_id, set())
        load = sum(self.bookings[b]["passengers"] for b in onboard)
        seen: set[int] = set()
        for node in self.routes.get(vehicle_id, []):
            booking = node["booking_id"]
            pax = self.bookings[booking]["passengers"]
            if node["node_type"] == "pickup":
                load += pax
                seen.add(booking)
            else:
                if booking not in seen and booking not in onboard:
                    self._err(f"{where}: dropoff of {booking} before its pickup")
                load -= pax
            if load > self.capacity:
                self._err(f"{where}: vehicle {vehicle_id} load {load} > {self.capacity}")

    def feed(self, event: Event) -> None:
        t = _t(event["current_sim_ts"])
        if t < self.last_t:
            self._err(f"time went back at {event['message_type']}")
        self.last_t = t
        data = event["data"]
        kind = event["message_type"]
        if kind == "bookings":
            for b in data["bookings"]:
                self.bookings[b["id"]] = dict(b, requested=_t(b["requested_ts"]))
                self.by_uid[b["uid"]] = b["id"]
        elif kind == "offers":
            for offer in data["offers"]:
                self.offers[offer["id"]] = self.by_uid[offer["booking_id"]]
        elif kind == "offer_accepted":
            self.accepted.add(self.offers[data["offer_id"]])
        elif kind == "bookings_cancellation":
            self.cancelled.update(data["booking_ids"])
        elif kind == "assignment":
            self.routes[data["vehicle_id"]] = list(data["nodes"])
            for a, b in zip(data["nodes"], data["nodes"][1:], strict=False):
                edge = data["edges"][data["nodes"].index(a)]
                if (edge["from_node_id"], edge["to_node_id"]) != (a["id"], b["id"]):
                    self._err("edges do not join consecutive nodes")
            self._check_route(data["vehicle_id"], "assignment")
        elif kind == "demand_modification":
            self.bookings[data["booking_id"]]["passengers"] = data["tickets"][0]["demand"]
            self._check_route(data["vehicle_id"], "demand_modification")
        elif kind == "node_status":
            self._node_done(data["vehicle_id"], data["node_id"], data["booking_id"],
                            data["node_type"], t)
        elif kind == "fail_to_board":
            booking = data["booking_ids"][0]
            self.failed.add(booking)
            route = self.routes.get(data["vehicle_id"], [])
            self.routes[data["vehicle_id"]] = [n for n in route if n["booking_id"] != booking]
        elif kind == "vehicle_state_changed":
            self.paths[data["vehicle_id"]] = decode(data["update"]["path"])
        elif kind == "gps_data":
            path = self.paths.get(data["vehicle_id"])
            if path is None:
                self._err(f"gps of vehicle {data['vehicle_id']} before any path")
            else:
                d = distance_to_path((data["lat"], data["lon"]), path)
                self.gps_checked += 1
                if d > self.gps_tolerance_m:
                    self._err(f"gps of vehicle {data['vehicle_id']} {d:.1f} m off its path")

    def _node_done(self, vehicle_id: int, node_id: int, booking_id: int, node_type: str,
                   t: float) -> None:
        route = self.routes.get(vehicle_id, [])
        if not route or route[0]["id"] != node_id:
            self._err(f"node {node_id} completed out of route order")
        self.routes[vehicle_id] = [n for n in route if n["id"] != node_id]
        booking = self.bookings[booking_id]
        onboard = self.onboard.setdefault(vehicle_id, set())
        if node_type == "pickup":
            if t > booking["requested"] + booking["max_wait_s"] + self.time_tolerance_s:
                self._err(f"booking {booking_id} picked up after its max wait")
            self.picked[booking_id] = t + self.dwell_s
            onboard.add(booking_id)
        else:
            if booking_id not in self.picked:
                self._err(f"booking {booking_id} dropped off before pickup")
            else:
                direct = math.hypot(*_metres((booking["pickup_lat"], booking["pickup_lon"]),
                                             (booking["dropoff_lat"], booking["dropoff_lon"])))
                limit = direct / self.speed_mps * self.max_detour_factor + self.dwell_s
                if t - self.picked[booking_id] > limit + self.time_tolerance_s + 1.0:
                    self._err(f"booking {booking_id} rode longer than allowed")
            self.dropped.add(booking_id)
            onboard.discard(booking_id)

    def finish(self) -> list[str]:
        for booking in sorted(self.accepted):
            done = booking in self.dropped and booking in self.picked
            if not (done or booking in self.failed or booking in self.cancelled):
                self._err(f"accepted booking {booking} never ended")
        return self.errors
