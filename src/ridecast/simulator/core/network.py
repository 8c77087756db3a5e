"""Road-network travel: shortest paths by time on a directed street graph.

``RoadNetwork`` loads a network file (see ``network_build``): nodes, directed edges with a
length, a free-flow time and the street geometry between their ends. ``NetworkTravel``
implements ``TravelModel`` on it: points are snapped to the nearest node with a KD-tree, times
come from one-to-many ``scipy.sparse.csgraph.dijkstra`` searches (full forward searches with
predecessors, and bounded backward searches on the reversed graph for ``reach``), each cached
per node in an LRU whose size follows from a memory budget, and a leg's geometry (polyline,
GPS positions) follows the edges' geometry. A position in the middle of an edge (a vehicle
re-routed while driving) is remembered with the rest of its edge, so the next leg starts on the
street it is on. There is no all-pairs table.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra
from scipy.spatial import cKDTree

from ...errors import BadRequest
from .polyline import LatLon
from .settings import NETWORKS, SimulatorSettings, user_network_path
from .travel import StraightLineTravel, TravelModel, bearing_deg

#: Predecessor arrays of searches (int16 or int32, see ``NetworkTravel``).
_Preds = NDArray[np.signedinteger[Any]]
#: Memory for cached full searches with predecessors (10 bytes a node each, 12 on a network
#: of 32,768 nodes or more): about 1,600 of them on the bundled network, fewer on a bigger
#: one (at least 16).
SOURCE_CACHE_BYTES = 100_000_000
#: Memory for cached bounded backward searches (``reach``; 8 bytes a node each): about 2,000
#: on the bundled network (at least 16).
REACH_CACHE_BYTES = 100_000_000
#: Cached legs (geometry + cumulative times) between two points.
LEG_CACHE = 50_000
#: Cached point-to-point times (cleared when full).
PAIR_CACHE = 500_000
#: Remembered mid-edge positions where legs may start (vehicles' anchors).
MIDPOINT_CACHE = 200_000
#: Mid-edge positions asked for once (GPS, snapshots, the scheduler's start points): kept
#: apart, so that they never push an anchor out of the cache above (cleared when full).
SCRATCH_POINTS = 4_096
#: Speed of the straight connector from an off-network point to its nearest node.
CONNECTOR_MPS = 15.0 / 3.6


def _metres(a: LatLon, b: LatLon) -> float:
    kx = 111_195.0 * math.cos(math.radians((a[0] + b[0]) * 0.5))
    return math.hypot((a[0] - b[0]) * 111_195.0, (a[1] - b[1]) * kx)


class RoadNetwork:
    """A directed street graph loaded from a network file."""

    def __init__(self, path: Path | str) -> None:
        with np.load(path) as data:
            self.nodes: NDArray[np.float64] = data["node_e6"].astype(np.float64) / 1e6
            self.edge_u: NDArray[np.int32] = data["edge_u"]
            self.edge_v: NDArray[np.int32] = data["edge_v"]
            self.edge_s: NDArray[np.float64] = data["edge_s"].astype(np.float64)
            self.edge_m: NDArray[np.float64] = data["edge_m"].astype(np.float64)
            self.geom_off: NDArray[np.int32] = data["geom_off"]
            self.geom: NDArray[np.float64] = data["geom_e6"].astype(np.float64) / 1e6
        n = len(self.nodes)
        self.size = n
        self.graph = csr_matrix((self.edge_s, (self.edge_u, self.edge_v)), shape=(n, n))
        self.reverse = self.graph.T.tocsr()
        self.edge_of = {(int(u), int(v)): i
                        for i, (u, v) in enumerate(zip(self.edge_u, self.edge_v, strict=True))}
        node_list = [(float(a), float(b)) for a, b in self.nodes]
        geom_list = [(float(a), float(b)) for a, b in self.geom]
        offs = [int(x) for x in self.geom_off]
        #: Per edge: its points (both ends) and the share of its time spent at each point.
        self.edge_geo: list[tuple[list[LatLon], list[float]]] = []
        for e, (u, v) in enumerate(zip(self.edge_u.tolist(), self.edge_v.tolist(), strict=True)):
            pts = [node_list[u], *geom_list[offs[e]:offs[e + 1]], node_list[v]]
            cum = [0.0]
            for p, q in itertools.pairwise(pts):
                cum.append(cum[-1] + _metres(p, q))
            total = cum[-1] or 1.0
            self.edge_geo.append((pts, [c / total for c in cum]))
        #: Per edge: its points after the first, and the seconds from its start to each
        #: (edge time x share, multiplied once here rather than in every leg).
        self.edge_tail: list[tuple[list[LatLon], list[float]]] = [
            (pts[1:], [secs * f for f in shares[1:]])
            for (pts, shares), secs in zip(self.edge_geo, self.edge_s.tolist(), strict=True)]
        self.lat0 = float(self.nodes[:, 0].mean())
        self._kx = math.cos(math.radians(self.lat0))
        self.tree = cKDTree(self._xy(self.nodes))
        self.bounds = (float(self.nodes[:, 0].min()), float(self.nodes[:, 1].min()),
                       float(self.nodes[:, 0].max()), float(self.nodes[:, 1].max()))

    def _xy(self, latlon: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.column_stack((latlon[:, 0], latlon[:, 1] * self._kx))

    def nearest(self, p: LatLon) -> int:
        """The node nearest to p."""
        _, i = self.tree.query((p[0], p[1] * self._kx))
        return int(i)

    def node_pos(self, i: int) -> LatLon:
        return (float(self.nodes[i, 0]), float(self.nodes[i, 1]))

    def edge_points(self, u: int, v: int) -> list[LatLon]:
        """The geometry of edge u->v, both ends included."""
        e = self.edge_of[(u, v)]
        inner = self.geom[self.geom_off[e]:self.geom_off[e + 1]]
        return [self.node_pos(u), *((float(a), float(b)) for a, b in inner), self.node_pos(v)]

    @cached_property
    def half_reach_s(self) -> float:
        """The median free-flow time to a node from the node nearest the network's centre:
        a search bounded by more than this settles about half the graph or more."""
        centre = self.nearest((float(self.nodes[:, 0].mean()), float(self.nodes[:, 1].mean())))
        dist = dijkstra(self.reverse, indices=centre)
        return float(np.median(dist[np.isfinite(dist)]))

    def contains(self, lat: float, lon: float) -> bool:
        return (self.bounds[0] <= lat <= self.bounds[2]
                and self.bounds[1] <= lon <= self.bounds[3])


@cache
def load_bundled(name: str) -> RoadNetwork:
    """A network shipped inside the package, loaded once per process."""
    ref = resources.files("ridecast.simulator.core") / "networks" / f"{name}.npz"
    with resources.as_file(ref) as path:
        return RoadNetwork(path)


@lru_cache(maxsize=8)
def _load_file(path: Path, mtime_ns: int) -> RoadNetwork:
    return RoadNetwork(path)


def load_file(path: Path) -> RoadNetwork:
    """An imported network, loaded once per process and file version (re-imports count)."""
    return _load_file(path, path.stat().st_mtime_ns)


def travel_for(settings: SimulatorSettings) -> TravelModel:
    """The travel model a simulation's settings ask for (see ``SimulatorSettings.network``)."""
    name = settings.network
    if name is None:
        centre = settings.area_centre()
        name = "gothenburg" if load_bundled("gothenburg").contains(*centre) else "straight"
    if name == "straight":
        return StraightLineTravel(settings.vehicle_speed_kmh)
    if name in NETWORKS:
        return NetworkTravel(load_bundled(name))
    path = user_network_path(name)
    if path is None:
        raise BadRequest(f"no network named {name!r}", code="invalid_simulation_data")
    return NetworkTravel(load_file(path.resolve()))


@dataclass(slots=True)
class Leg:
    """A drive between two points: the points passed and the time at each."""

    points: list[LatLon]
    times: list[float]
    metres: float

    @property
    def seconds(self) -> float:
        return self.times[-1]


class NetworkReach:
    """Times to (or, ``forward``, from) one point from one bounded search; ``inf`` beyond
    the search's limit. Answers agree with ``NetworkTravel.duration_s``."""

    __slots__ = ("connector_s", "dist", "factor", "forward", "node_at", "target", "travel")

    def __init__(self, travel: NetworkTravel, target: LatLon, dist: NDArray[np.float64],
                 forward: bool) -> None:
        self.travel = travel
        self.target = target
        self.dist = dist
        self.forward = forward
        self.node_at = travel._node_at
        #: ``dist`` and ``connector_s`` are free-flow seconds; times are these x ``factor``.
        self.factor = travel.factor
        # Off the network, the target's connector to (or from) its node.
        self.connector_s = (travel._start_s(target)[1] if forward else travel._end(target)[2])

    def times_at(self, nodes: list[int]) -> list[float]:
        """``time`` of points on the network nodes ``nodes`` (the same float operations,
        without finding each point's node)."""
        item, conn, factor = self.dist.item, self.connector_s, self.factor
        return [(item(k) + conn) * factor for k in nodes]

    def time(self, a: LatLon) -> float:
        if a == self.target:
            return 0.0
        node = self.node_at.get(a)
        if node is not None:  # the usual case: a stop on a network node
            return (float(self.dist[node]) + self.connector_s) * self.factor
        if self.forward:
            t, _, tail_s, _ = self.travel._end(a)
            return (self.connector_s + float(self.dist[t]) + tail_s) * self.factor
        s, head_s = self.travel._start_s(a)
        return (head_s + float(self.dist[s]) + self.connector_s) * self.factor


@dataclass(slots=True)
class _Mid:
    """A point inside an edge: the rest of the edge to its head node. Its length in metres
    is only needed when a leg starts there (most points are only timed): computed then."""

    head: int
    rest: list[LatLon]  # from the point (included) to the head node (included)
    seconds: float
    _metres: float | None = None

    @property
    def metres(self) -> float:
        if self._metres is None:
            self._metres = sum(_metres(p, q) for p, q in itertools.pairwise(self.rest))
        return self._metres


class NetworkTravel:
    """``TravelModel`` on a ``RoadNetwork``; see the module docstring."""

    def __init__(self, network: RoadNetwork) -> None:
        self.net = network
        self.speed_mps = float((network.edge_m / network.edge_s).max())  # upper bound
        #: Congestion: every time is the free-flow time x this (>= 1); the engine sets it by
        #: the hour and re-times the vehicles on the road when it changes.
        self.factor = 1.0
        self._edge_m: list[float] = network.edge_m.tolist()
        self._node_at: dict[LatLon, int] = {network.node_pos(i): i for i in range(network.size)}
        #: Network node at a point, for points on one.
        self.node_at = self._node_at
        #: Predecessors as the smallest integers that hold every node's index (and scipy's
        #: -9999 for none): more searches fit in the cache.
        self._pred_type: type[np.signedinteger[Any]] = (
            np.int16 if network.size <= np.iinfo(np.int16).max else np.int32)
        self._sources: OrderedDict[int, tuple[NDArray[np.float64], _Preds]] = (
            OrderedDict())
        # Bounded backward searches by node: (limit, times to the node).
        self._targets: OrderedDict[int, tuple[float, NDArray[np.float64]]] = OrderedDict()
        self.reach_cache = max(16, REACH_CACHE_BYTES // (8 * network.size))
        self.source_cache = max(16, SOURCE_CACHE_BYTES // (
            (8 + np.dtype(self._pred_type).itemsize) * network.size))
        self._pairs: dict[tuple[LatLon, LatLon], float] = {}
        self._legs: OrderedDict[tuple[LatLon, LatLon], Leg] = OrderedDict()
        self._mids: OrderedDict[LatLon, _Mid | tuple[Leg, int, float]] = OrderedDict()
        self._scratch: dict[LatLon, _Mid | tuple[Leg, int, float]] = {}
        self.searches = 0

    # ---- points ----------------------------------------------------------------------------

    def snap(self, p: LatLon) -> LatLon:
        """The network node nearest to p (requests and vehicles start on the streets)."""
        return self.net.node_pos(self.net.nearest(p))

    def _search(self, src: int) -> tuple[NDArray[np.float64], _Preds]:
        hit = self._sources.get(src)
        if hit is not None:
            self._sources.move_to_end(src)
            return hit
        self.searches += 1
        dist, pred = dijkstra(self.net.graph, indices=src, return_predecessors=True)
        res = (dist, pred.astype(self._pred_type))
        self._sources[src] = res
        if len(self._sources) > self.source_cache:
            self._sources.popitem(last=False)
        return res

    def _tree_to(self, s: int, t: int) -> _Preds:
        """Shortest-path predecessors from node ``s`` that reach ``t``: the cached full
        search from ``s`` if there is one; else, when the time from ``s`` to ``t`` is known
        (a cached backward search from ``t`` covers ``s``), a forward search bounded by it,
        which settles only what is nearer than the target, unless that would settle about
        half the graph anyway; else a full search (cached)."""
        hit = self._sources.get(s)
        if hit is not None:
            self._sources.move_to_end(s)
            return hit[1]
        back = self._targets.get(t)
        if back is not None:
            known = float(back[1][s])
            if math.inf > known >= self.net.half_reach_s:
                return self._search(s)[1]  # about as dear as the bounded one, and kept
            if known != math.inf:
                self.searches += 1
                dist, pred = dijkstra(self.net.graph, indices=s, return_predecessors=True,
                                      limit=known * (1.0 + 1e-9) + 1e-6)
                if dist[t] != math.inf:
                    tree: _Preds = pred.astype(self._pred_type)
                    return tree
        return self._search(s)[1]

    def reach(self, target: LatLon, limit_s: float, *, forward: bool = False) -> NetworkReach:
        """Times to ``target`` (one bounded backward search on the reversed graph, limit
        ``limit_s``) or, ``forward``, from it (the full search that legs from ``target`` use
        anyway); see ``NetworkReach``.

        Backward searches are cached per node with the limit they ran with; a cached one with
        a limit at least as large answers the same question exactly. One whose limit would
        settle about half the graph or more (``RoadNetwork.half_reach_s``) runs to the end:
        it costs little more, and answers every later question about its node (on the
        bundled network nearly every search is such; on a country's, few are).
        """
        node = self._node(target)
        if forward:
            return NetworkReach(self, target, self._search(node)[0], forward)
        limit = limit_s / self.factor if math.isfinite(limit_s) else math.inf
        if limit >= self.net.half_reach_s:
            limit = math.inf
        cache = self._targets
        hit = cache.get(node)
        if hit is not None and hit[0] >= limit:
            cache.move_to_end(node)
            return NetworkReach(self, target, hit[1], forward)
        self.searches += 1
        dist = dijkstra(self.net.reverse, indices=node,
                        limit=limit if limit != math.inf else np.inf)
        cache[node] = (limit, dist)
        if len(cache) > self.reach_cache:
            cache.popitem(last=False)
        return NetworkReach(self, target, dist, forward)

    def place(self, p: LatLon) -> tuple[int, float]:
        """The node a drive from p starts at, and the seconds it takes to get there."""
        node = self._node_at.get(p)
        if node is not None:
            return node, 0.0
        node, seconds = self._start_s(p)
        return node, seconds

    def _node(self, p: LatLon) -> int:
        node = self._node_at.get(p)
        return self.net.nearest(p) if node is None else node

    def _start(self, a: LatLon) -> tuple[int, list[LatLon], float, float]:
        """(node, points to reach it from a, seconds, metres) for any point a."""
        node = self._node_at.get(a)
        if node is not None:
            return node, [a], 0.0, 0.0
        mid = self._mid(a)
        if mid is not None:
            return mid.head, mid.rest, mid.seconds, mid.metres
        node = self.net.nearest(a)
        pos = self.net.node_pos(node)
        m = _metres(a, pos)
        return node, [a, pos], m / CONNECTOR_MPS, m

    def resolved(self, known: dict[LatLon, _Mid | tuple[Leg, int, float]],
                 ) -> dict[LatLon, _Mid | tuple[Leg, int, float]]:
        """A copy of ``known`` (``_mids`` or ``_scratch``, its type and order kept) with every
        point resolved as ``_mid`` resolves it on first use: the same answers, without the
        whole leg each point was seen on (what a snapshot stores)."""
        out = type(known)()
        for pos, mid in known.items():
            out[pos] = self._resolve(pos, *mid) if isinstance(mid, tuple) else mid
        return out

    def _mid(self, a: LatLon) -> _Mid | None:
        """The remembered mid-edge position at a (resolved on first use), or None."""
        for known in (self._mids, self._scratch):
            mid = known.get(a)
            if mid is not None:
                if isinstance(mid, tuple):
                    mid = known[a] = self._resolve(a, *mid)
                return mid
        return None

    def _start_s(self, a: LatLon) -> tuple[int, float]:
        """(node, seconds) of ``_start``, without the points and metres it does not need."""
        node = self._node_at.get(a)
        if node is not None:
            return node, 0.0
        mid = self._mid(a)
        if mid is not None:
            return mid.head, mid.seconds
        node, _, seconds, _ = self._start(a)
        return node, seconds

    def _end(self, b: LatLon) -> tuple[int, list[LatLon], float, float]:
        """(node, points from it to b, seconds, metres) for any target point b."""
        node = self._node_at.get(b)
        if node is not None:
            return node, [b], 0.0, 0.0
        node = self.net.nearest(b)
        pos = self.net.node_pos(node)
        m = _metres(pos, b)
        return node, [pos, b], m / CONNECTOR_MPS, m

    # ---- legs ------------------------------------------------------------------------------

    def leg(self, a: LatLon, b: LatLon) -> Leg:
        key = (a, b)
        hit = self._legs.get(key)
        if hit is not None:
            return hit
        leg = self._build_leg(a, b)
        self._legs[key] = leg
        if len(self._legs) > LEG_CACHE:
            self._legs.popitem(last=False)
        return leg

    def _build_leg(self, a: LatLon, b: LatLon) -> Leg:
        if a == b:
            return Leg([a, b], [0.0, 0.0], 0.0)
        s, head_pts, head_s, head_m = self._start(a)
        t, tail_pts, tail_s, tail_m = self._end(b)
        nodes = [t]
        if s != t:
            step = self._tree_to(s, t).item
            node = t
            while node != s:
                node = step(node)
                nodes.append(node)
            nodes.reverse()
        points = list(head_pts)
        times = [0.0]
        metres = head_m
        for p, q in itertools.pairwise(head_pts):
            times.append(times[-1] + head_s * (_metres(p, q) / head_m if head_m else 0.0))
        edge_of, edge_tail, edge_m = self.net.edge_of, self.net.edge_tail, self._edge_m
        for u, v in itertools.pairwise(nodes):
            e = edge_of[(u, v)]
            pts, offsets = edge_tail[e]
            metres += edge_m[e]
            t0 = times[-1]
            points += pts
            times += [t0 + dt for dt in offsets]
        for p, q in itertools.pairwise(tail_pts):
            points.append(q)
            times.append(times[-1] + (tail_s * _metres(p, q) / tail_m if tail_m else 0.0))
        metres += tail_m
        if len(points) == 1:
            points.append(b)
            times.append(times[-1])
        return Leg(points, times, metres)

    # ---- TravelModel -----------------------------------------------------------------------

    def duration_s(self, a: LatLon, b: LatLon) -> float:
        key = (a, b)
        seconds = self._pairs.get(key)
        if seconds is None:
            seconds = self._pairs[key] = self._duration(a, b)
            if len(self._pairs) > PAIR_CACHE:
                self._pairs.clear()
        return seconds * self.factor

    def _duration(self, a: LatLon, b: LatLon) -> float:
        hit = self._legs.get((a, b))
        if hit is not None:
            return hit.seconds
        if a == b:
            return 0.0
        s, head_s = self._start_s(a)
        t, _, tail_s, _ = self._end(b)
        if s == t:
            return head_s + tail_s
        found = self._targets.get(t)
        if found is not None:
            value = float(found[1][s])
            if value != math.inf:
                return head_s + value + tail_s
        full = self._sources.get(s)
        if full is not None:
            return head_s + float(full[0][t]) + tail_s
        dist, _ = self._search(s)
        return head_s + float(dist[t]) + tail_s

    def distance_m(self, a: LatLon, b: LatLon) -> float:
        return self.leg(a, b).metres

    def path(self, a: LatLon, b: LatLon) -> list[LatLon]:
        return list(self.leg(a, b).points)

    def position(self, a: LatLon, b: LatLon, elapsed_s: float, *,
                 keep: bool = False) -> tuple[LatLon, float]:
        pos, p, q = self._locate(a, b, elapsed_s, keep)
        return pos, bearing_deg(p, q) if p != q else 0.0

    def speed_mps_at(self, a: LatLon, b: LatLon, elapsed_s: float) -> float:
        """The speed of a vehicle that left a for b ``elapsed_s`` ago: the length over the
        time of the piece of street it is on, at the current congestion factor (0 once it
        has arrived)."""
        leg, i, _at_s = self._piece(a, b, elapsed_s)
        if i is None:
            return 0.0
        span = leg.times[i] - leg.times[i - 1]
        if span <= 0:
            return 0.0
        return _metres(leg.points[i - 1], leg.points[i]) / (span * self.factor)

    def travelled_m(self, a: LatLon, b: LatLon, elapsed_s: float) -> float:
        """Metres driven along the leg from a to b after ``elapsed_s``: the share of the
        leg's length up to ``position``. (``distance_m`` to that point would route to the
        node nearest it, which may lie ahead, and count the way there and back.)"""
        leg, i, at_s = self._piece(a, b, elapsed_s)
        if i is None:
            return leg.metres
        pts, times = leg.points, leg.times
        span = times[i] - times[i - 1]
        f = min(1.0, max(0.0, (at_s - times[i - 1]) / span if span > 0 else 1.0))
        done = sum(_metres(p, q) for p, q in itertools.pairwise(pts[:i]))
        done += f * _metres(pts[i - 1], pts[i])
        total = sum(_metres(p, q) for p, q in itertools.pairwise(pts))
        return leg.metres * done / total if total > 0 else 0.0

    def _piece(self, a: LatLon, b: LatLon, elapsed_s: float) -> tuple[Leg, int | None, float]:
        """The leg from a to b, the index of the point that ends the piece of street a
        vehicle that left ``elapsed_s`` ago is on (None once it has arrived), and its time
        on the leg in free-flow seconds."""
        at_s = elapsed_s / self.factor
        leg = self._legs.get((a, b))
        if leg is None:
            leg = self.leg(a, b)
        if at_s >= leg.times[-1]:
            return leg, None, at_s
        return leg, max(1, bisect_right(leg.times, max(0.0, at_s))), at_s

    def point(self, a: LatLon, b: LatLon, elapsed_s: float) -> LatLon:
        """The position of ``position`` without its bearing (the scheduler's use)."""
        return self._locate(a, b, elapsed_s, False)[0]

    def _locate(self, a: LatLon, b: LatLon, elapsed_s: float,
                keep: bool) -> tuple[LatLon, LatLon, LatLon]:
        """Where a vehicle that left a for b ``elapsed_s`` ago is, and the ends of the
        segment it is on (its bearing). The point is remembered as a mid-edge position, so
        that times from it follow its street: with ``keep`` (a vehicle's new anchor) in the
        LRU of anchors, else in the scratch set. Only what is kept can push an anchor out,
        so what the scheduler or a status request asks never changes a later drive."""
        elapsed_s /= self.factor  # legs are timed at free flow
        leg = self._legs.get((a, b))
        if leg is None:
            leg = self.leg(a, b)
        pts, times = leg.points, leg.times
        if elapsed_s >= times[-1]:
            return b, pts[-2], pts[-1]
        i = max(1, bisect_right(times, max(0.0, elapsed_s)))
        p, q = pts[i - 1], pts[i]
        span = times[i] - times[i - 1]
        f = (elapsed_s - times[i - 1]) / span if span > 0 else 1.0
        f = min(1.0, max(0.0, f))
        pos = (p[0] + (q[0] - p[0]) * f, p[1] + (q[1] - p[1]) * f)
        if pos in self._node_at:
            return pos, p, q
        mids = self._mids
        if keep:
            if pos not in mids:
                mids[pos] = (leg, i, elapsed_s)  # resolved only if a leg starts there
                if len(mids) > MIDPOINT_CACHE:
                    mids.popitem(last=False)
        elif pos not in mids:
            scratch = self._scratch
            if pos not in scratch:
                if len(scratch) >= SCRATCH_POINTS:
                    scratch.clear()
                scratch[pos] = (leg, i, elapsed_s)
        return pos, p, q

    def _resolve(self, pos: LatLon, leg: Leg, i: int, elapsed_s: float) -> _Mid:
        """The rest of the edge from ``pos``, so a new leg can start there."""
        j = i
        while j < len(leg.points) - 1 and leg.points[j] not in self._node_at:
            j += 1
        rest = [pos, *leg.points[i:j + 1]]
        seconds = max(0.0, leg.times[j] - elapsed_s)
        head = self._node_at.get(leg.points[j])
        if head is None:
            head = self.net.nearest(leg.points[j])
        return _Mid(head, rest, seconds)
