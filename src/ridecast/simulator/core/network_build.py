"""Turn OpenStreetMap ways into the simulator's compact network file (pure, no network I/O).

Reads OpenStreetMap ways (an overpass GeoJSON document, or an ``.osm.pbf`` file through
pyosmium), keeps drivable ones, builds a directed graph (one-way streets, ``oneway=-1``,
roundabouts and motorways), takes speeds from ``maxspeed`` or else from the road class,
keeps the largest strongly connected component, then merges chains of degree-2 nodes into
single edges while keeping their street geometry, and writes an ``.npz`` file read by
``network.RoadNetwork``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

#: km/h by road class when a way has no usable ``maxspeed``.
CLASS_SPEED_KMH: dict[str, float] = {
    "motorway": 90, "motorway_link": 50, "trunk": 70, "trunk_link": 40,
    "primary": 50, "primary_link": 40, "secondary": 50, "secondary_link": 40,
    "tertiary": 40, "tertiary_link": 30, "unclassified": 40, "residential": 30,
    "living_street": 10, "road": 30,
}
ONEWAY_YES = {"yes", "1", "true"}
Way = tuple[list[tuple[float, float]], Mapping[str, Any]]  # (lat, lon) points, OSM tags


def _speed_kmh(tags: Mapping[str, Any]) -> float:
    raw = str(tags.get("maxspeed", "")).strip().lower()
    try:
        value = float(raw.split()[0]) if raw else 0.0
        if raw.endswith("mph"):
            value *= 1.609344
    except ValueError:
        value = 0.0
    if 5.0 <= value <= 150.0:
        return value
    return CLASS_SPEED_KMH[str(tags["highway"])]


def _metres(a: tuple[float, float], b: tuple[float, float]) -> float:
    kx = 111_195.0 * math.cos(math.radians((a[0] + b[0]) * 0.5))
    return math.hypot((a[0] - b[0]) * 111_195.0, (a[1] - b[1]) * kx)


def ways_from_geojson(data: Mapping[str, Any]) -> Iterable[Way]:
    """Drivable LineString ways of an overpass GeoJSON FeatureCollection."""
    for feature in data.get("features", []):
        geometry = feature.get("geometry") or {}
        tags = feature.get("properties") or {}
        if geometry.get("type") != "LineString" or tags.get("highway") not in CLASS_SPEED_KMH:
            continue
        if tags.get("area") == "yes" or tags.get("access") in ("no", "private"):
            continue
        yield [(float(lat), float(lon)) for lon, lat in geometry["coordinates"]], tags


def ways_from_osm(path: Path) -> Iterable[Way]:
    """Drivable ways of an OpenStreetMap file (``.osm.pbf``, ``.osm``), read with pyosmium
    (the ``osm`` extra: ``pip install 'ridecast[osm]'``)."""
    import osmium

    # Nodes are read for their locations only; ways without a highway tag never reach Python.
    processor = (osmium.FileProcessor(str(path), osmium.osm.NODE | osmium.osm.WAY)
                 .with_locations()
                 .with_filter(osmium.filter.EntityFilter(osmium.osm.WAY))
                 .with_filter(osmium.filter.KeyFilter("highway")))
    for way in processor:
        if not isinstance(way, osmium.osm.Way):
            continue
        tags = {tag.k: tag.v for tag in way.tags}
        if tags.get("highway") not in CLASS_SPEED_KMH:
            continue
        if tags.get("area") == "yes" or tags.get("access") in ("no", "private"):
            continue
        points = [(node.location.lat, node.location.lon) for node in way.nodes
                  if node.location.valid()]
        if len(points) >= 2:
            yield points, tags


def build(ways: Iterable[Way], out: Path) -> dict[str, int]:
    """Build the graph from ``ways`` and write it to ``out``; return a few counts."""
    index: dict[tuple[int, int], int] = {}
    coords: list[tuple[float, float]] = []
    arcs: dict[tuple[int, int], float] = {}  # (u, v) -> seconds (fastest parallel way)
    lengths: dict[tuple[int, int], float] = {}

    def node(p: tuple[float, float]) -> int:
        key = (round(p[0] * 1e7), round(p[1] * 1e7))
        found = index.get(key)
        if found is None:
            found = index[key] = len(coords)
            coords.append(p)
        return found

    for points, tags in ways:
        oneway = str(tags.get("oneway", "")).lower()
        forward = True
        backward = not (oneway in ONEWAY_YES or tags.get("junction") == "roundabout"
                        or (tags.get("highway") == "motorway" and oneway != "no"))
        if oneway == "-1":
            forward, backward = False, True
        mps = _speed_kmh(tags) / 3.6
        ids = [node(p) for p in points]
        for a, b in itertools.pairwise(ids):
            if a == b:
                continue
            m = _metres(coords[a], coords[b])
            for u, v, on in ((a, b, forward), (b, a, backward)):
                if on and m / mps < arcs.get((u, v), math.inf):
                    arcs[(u, v)] = m / mps
                    lengths[(u, v)] = m
    n = len(coords)
    if not arcs:
        raise ValueError("no drivable streets in the input")
    us = np.fromiter((k[0] for k in arcs), dtype=np.int64, count=len(arcs))
    vs = np.fromiter((k[1] for k in arcs), dtype=np.int64, count=len(arcs))
    graph = csr_matrix((np.ones(len(arcs)), (us, vs)), shape=(n, n))
    _, labels = connected_components(graph, directed=True, connection="strong")
    biggest = int(np.bincount(labels).argmax())
    keep = labels == biggest
    out_adj: dict[int, dict[int, tuple[float, float]]] = {}
    in_adj: dict[int, set[int]] = {}
    for (u, v), s in arcs.items():
        if keep[u] and keep[v]:
            out_adj.setdefault(u, {})[v] = (s, lengths[(u, v)])
            in_adj.setdefault(v, set()).add(u)

    def removable(v: int) -> bool:
        outs, ins = set(out_adj.get(v, ())), in_adj.get(v, set())
        nbrs = outs | ins
        if len(nbrs) != 2:
            return False
        return len(outs) == len(ins) == 2 or (len(outs) == len(ins) == 1 and outs != ins)

    nodes = [v for v in range(n) if keep[v]]
    kept = [v for v in nodes if not removable(v)]
    if len(kept) < 2:
        raise ValueError("the largest connected street network has fewer than 2 junctions")
    new_id = {v: i for i, v in enumerate(kept)}
    e_u: list[int] = []
    e_v: list[int] = []
    e_s: list[float] = []
    e_m: list[float] = []
    g_off: list[int] = [0]
    g_pts: list[tuple[float, float]] = []
    best: dict[tuple[int, int], int] = {}
    for s in kept:
        for first in out_adj.get(s, {}):
            prev, cur = s, first
            secs, metres = out_adj[s][first]
            inner: list[tuple[float, float]] = []
            while cur not in new_id:
                inner.append(coords[cur])
                nxt = next((w for w in out_adj[cur] if w != prev), None)
                if nxt is None:
                    break
                step = out_adj[cur][nxt]
                secs += step[0]
                metres += step[1]
                prev, cur = cur, nxt
            if cur not in new_id or cur == s:
                continue
            key = (new_id[s], new_id[cur])
            if key in best and e_s[best[key]] <= secs:
                continue
            if key in best:  # a faster parallel chain: overwrite in place is messy; skip old
                e_s[best[key]] = math.inf
            best[key] = len(e_u)
            e_u.append(key[0])
            e_v.append(key[1])
            e_s.append(secs)
            e_m.append(metres)
            g_pts.extend(inner)
            g_off.append(len(g_pts))
    live = [i for i, s in enumerate(e_s) if s != math.inf]
    geo = np.array(g_pts, dtype=np.float64).reshape(-1, 2)
    offsets = np.array(g_off, dtype=np.int64)
    geom_parts = [geo[offsets[i]:offsets[i + 1]] for i in live]
    geom_off = np.concatenate([[0], np.cumsum([len(p) for p in geom_parts])]).astype(np.int32)
    geom = np.concatenate(geom_parts) if geom_parts else np.zeros((0, 2))
    node_xy = np.array([coords[v] for v in kept], dtype=np.float64)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as fh:
        np.savez_compressed(
            fh,
            node_e6=np.round(node_xy * 1e6).astype(np.int32),
            edge_u=np.array([e_u[i] for i in live], dtype=np.int32),
            edge_v=np.array([e_v[i] for i in live], dtype=np.int32),
            edge_s=np.array([e_s[i] for i in live], dtype=np.float32),
            edge_m=np.array([e_m[i] for i in live], dtype=np.float32),
            geom_off=geom_off,
            geom_e6=np.round(geom * 1e6).astype(np.int32),
        )
    return {"raw_nodes": n, "scc_nodes": len(nodes), "nodes": len(kept), "edges": len(live)}


def build_from_geojson(data: Mapping[str, Any], out: Path) -> dict[str, int]:
    """``build`` over the drivable ways of an overpass GeoJSON document."""
    return build(ways_from_geojson(data), out)
