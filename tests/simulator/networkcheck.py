"""Checks of a simulator stream against a road network, from the events alone.

``NetworkCheck`` is fed the same events as ``StreamCheck`` and checks what driving on streets
means: GPS points near a network edge, route polylines made of consecutive directed edges
(so one-way streets are respected), and node arrivals no faster than the edges' speeds allow.
It reads the network file itself (nodes, edges, geometry), not the simulator's routing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from scipy.sparse.csgraph import dijkstra
from scipy.spatial import cKDTree

from ridecast.simulator.core.network import RoadNetwork
from ridecast.simulator.core.polyline import decode

NODE_MATCH_M = 0.9  # polyline5 rounds to 1e-5 degrees: at most ~0.7 m here


def _t(ts: str) -> float:
    return datetime.fromisoformat(ts).timestamp()


@dataclass
class NetworkCheck:
    net: RoadNetwork
    gps_tolerance_m: float = 10.0
    min_factor: float = 1.0  # congestion: no drive faster than free flow x this
    errors: list[str] = field(default_factory=list)
    gps_checked: int = 0
    edges_checked: int = 0
    oneway_traversals: int = 0
    legs_timed: int = 0
    last_node: dict[int, tuple[int, float]] = field(default_factory=dict)
    node_pos: dict[int, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        net = self.net
        self.kx = math.cos(math.radians(net.lat0)) * 111_195.0
        dense: list[tuple[float, float]] = []
        for pts, _ in net.edge_geo:
            for (a, b), (c, d) in itertools.pairwise(pts):
                steps = max(1, int(math.hypot((c - a) * 111_195.0, (d - b) * self.kx) / 2.0))
                dense.extend((a + (c - a) * k / steps, b + (d - b) * k / steps)
                             for k in range(steps + 1))
        self.dense = cKDTree(self._xy(np.array(dense)))
        self.nodes = cKDTree(self._xy(net.nodes))
        self.edges = set(net.edge_of)

    def _xy(self, latlon: Any) -> Any:
        return np.column_stack((latlon[:, 0] * 111_195.0, latlon[:, 1] * self.kx))

    def _err(self, message: str) -> None:
        if len(self.errors) < 50:
            self.errors.append(message)

    def _node_of(self, p: tuple[float, float]) -> int | None:
        d, i = self.nodes.query((p[0] * 111_195.0, p[1] * self.kx))
        return int(i) if d <= NODE_MATCH_M else None

    def check_polyline(self, points: list[tuple[float, float]], where: str) -> None:
        """Consecutive network nodes along the polyline must be joined by a directed edge."""
        seq = [n for n in (self._node_of(p) for p in points) if n is not None]
        for u, v in itertools.pairwise(seq):
            if u == v:
                continue
            self.edges_checked += 1
            if (u, v) in self.edges:
                if (v, u) not in self.edges:
                    self.oneway_traversals += 1
            elif (v, u) in self.edges:
                self._err(f"{where}: drives {v}->{u} against a one-way street")
            else:
                self._err(f"{where}: nodes {u}->{v} are not joined by an edge")
        far = self.dense.query(self._xy(np.array(points)))[0]
        if len(points) > 1 and float(far[1:].max()) > 1.0:
            self._err(f"{where}: a polyline point is {float(far.max()):.1f} m off the streets")

    def feed(self, event: dict[str, Any]) -> None:
        kind, data = event["message_type"], event["data"]
        if kind == "assignment":
            for node in data["nodes"]:
                self.node_pos[node["id"]] = (node["lat"], node["lon"])
            for edge in data["edges"]:
                self.check_polyline(decode(edge["polyline5"]), "assignment")
        elif kind == "vehicle_state_changed":
            self.check_polyline(decode(data["update"]["path"]), "vehicle_state_changed")
        elif kind == "gps_data":
            d, _ = self.dense.query((data["lat"] * 111_195.0, data["lon"] * self.kx))
            self.gps_checked += 1
            if d > self.gps_tolerance_m:
                self._err(f"gps of vehicle {data['vehicle_id']} {d:.1f} m off the streets")
        elif kind == "node_status":
            self._arrived(data["vehicle_id"], data["node_id"], _t(event["current_sim_ts"]))

    def _arrived(self, vehicle: int, node_id: int, t: float) -> None:
        """Two successive stops: the time between them is at least the fastest drive."""
        here = self._node_of(self.node_pos[node_id])
        prev = self.last_node.get(vehicle)
        if here is None:
            self._err(f"node {node_id} is not on a network node")
            return
        self.last_node[vehicle] = (here, t)
        if prev is None or prev[0] == here:
            return
        fastest = self.min_factor * float(
            dijkstra(self.net.graph, indices=prev[0], limit=t - prev[1] + 60)[here])
        self.legs_timed += 1
        if t - prev[1] < fastest - 1.0:
            self._err(f"vehicle {vehicle} drove {prev[0]}->{here} in {t - prev[1]:.0f} s, "
                      f"faster than the streets allow ({fastest:.0f} s)")
