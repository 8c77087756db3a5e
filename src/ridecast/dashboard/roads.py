"""The streets of a bundled road network, as the dashboard map draws them without tiles.

``GET /dashboard/networks/{name}.json`` (``name``: a network shipped in the package, such as
``gothenburg``) answers the network's streets, each street between two junctions once (a
two-way street is one line, not two), as polylines encoded at precision 5, with the data's
attribution and licence beside them: the network is OpenStreetMap data under the ODbL, served
as a file of its own, apart from ridecast's code, and credited wherever the map shows
(docs/dashboard.md). Networks imported with ``ridecast network import`` are not served: the
route is public, like the page's other assets, and an imported network is the operator's.

``street_lines`` is the pure part; the answer is built once per process and network.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..simulator.core.polyline import LatLon, encode
from ..simulator.core.settings import NETWORKS

ATTRIBUTION = "© OpenStreetMap contributors"
LICENSE = "ODbL-1.0"
LICENSE_URL = "https://www.openstreetmap.org/copyright"
BUNDLED = frozenset(NETWORKS - {"straight"})
"""The networks this route serves: those shipped in the package."""


def street_lines(nodes: NDArray[np.float64], edge_u: NDArray[np.int32],
                 edge_v: NDArray[np.int32], geom_off: NDArray[np.int32],
                 geom: NDArray[np.float64]) -> list[list[LatLon]]:
    """One line per street between two junctions: an edge's end nodes with its geometry in
    between; of a two-way street's two directed edges, only the first is kept."""
    seen: set[tuple[int, int, int]] = set()
    lines: list[list[LatLon]] = []
    points = geom.tolist()
    corners = nodes.tolist()
    for e, (u, v) in enumerate(zip(edge_u.tolist(), edge_v.tolist(), strict=True)):
        inner = points[int(geom_off[e]):int(geom_off[e + 1])]
        # Parallel streets between the same junctions differ in their geometry's length.
        key = (min(u, v), max(u, v), len(inner))
        if key in seen:
            continue
        seen.add(key)
        lines.append([tuple(corners[u]), *(tuple(p) for p in inner), tuple(corners[v])])
    return lines


def network_document(name: str, lines: list[list[LatLon]]) -> dict[str, Any]:
    """The JSON the page reads: attribution first, then bounds and the encoded streets."""
    lats = [p[0] for line in lines for p in line]
    lons = [p[1] for line in lines for p in line]
    return {
        "name": name,
        "attribution": ATTRIBUTION,
        "license": LICENSE,
        "license_url": LICENSE_URL,
        "bounds": [min(lats), min(lons), max(lats), max(lons)] if lines else None,
        "streets": [encode(line) for line in lines],
    }


@cache
def bundled_network_json(name: str) -> bytes:
    """The answer for a bundled network, built once per process."""
    if name not in BUNDLED:
        raise KeyError(name)
    ref = resources.files("ridecast.simulator.core") / "networks" / f"{name}.npz"
    with resources.as_file(ref) as path, np.load(path) as data:
        lines = street_lines(data["node_e6"].astype(np.float64) / 1e6, data["edge_u"],
                             data["edge_v"], data["geom_off"],
                             data["geom_e6"].astype(np.float64) / 1e6)
    return json.dumps(network_document(name, lines), separators=(",", ":")).encode()
