"""``ridecast network import``: an .osm.pbf made here becomes a network a simulation drives on."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import osmium
import pytest
from typer.testing import CliRunner

from ridecast.cli.main import app
from ridecast.errors import BadRequest
from ridecast.simulator import Engine, SimulatorSettings, read_settings
from ridecast.simulator.core.network import NetworkTravel, RoadNetwork

from .networkcheck import NetworkCheck

LAT0, LON0 = 59.33, 18.06
STEP = 0.0018  # about 200 m north-south, 100 m east-west
SIZE = 5


def grid_id(r: int, c: int) -> int:
    return 1 + r * SIZE + c


def write_pbf(path: Path) -> None:
    """A 5x5 street grid with one one-way avenue, a footway, a one-way stub that leads in
    but not out, and an island street far away: only the grid should remain."""
    nodes: dict[int, tuple[float, float]] = {}
    for r in range(SIZE):
        for c in range(SIZE):
            nodes[grid_id(r, c)] = (LAT0 + r * STEP, LON0 + c * STEP)
    nodes[100] = (LAT0 - STEP, LON0)  # stub start
    nodes[200], nodes[201] = (LAT0 + 0.1, LON0 + 0.1), (LAT0 + 0.1, LON0 + 0.102)  # island
    nodes[300] = (LAT0 + STEP / 2, LON0 + STEP / 2)  # footway end
    ways: list[tuple[list[int], dict[str, str]]] = []
    for r in range(SIZE):
        ways.append(([grid_id(r, c) for c in range(SIZE)], {"highway": "residential"}))
    for c in range(SIZE):
        tags = {"highway": "secondary", "maxspeed": "50"}
        if c == 2:
            tags["oneway"] = "yes"  # northbound only
        ways.append(([grid_id(r, c) for r in range(SIZE)], tags))
    ways.append(([100, grid_id(0, 0)], {"highway": "residential", "oneway": "yes"}))
    ways.append(([200, 201], {"highway": "residential"}))
    ways.append(([grid_id(0, 0), 300], {"highway": "footway"}))
    with osmium.SimpleWriter(str(path)) as writer:
        for nid, (lat, lon) in sorted(nodes.items()):
            writer.add_node(osmium.osm.mutable.Node(id=nid, location=(lon, lat)))
        for wid, (refs, tags) in enumerate(ways, start=1):
            writer.add_way(osmium.osm.mutable.Way(id=wid, nodes=refs, tags=tags))


@pytest.fixture
def imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RIDECAST_NETWORK_DIR", str(tmp_path / "networks"))
    pbf = tmp_path / "grid.osm.pbf"
    write_pbf(pbf)
    result = CliRunner().invoke(app, ["network", "import", str(pbf), "grid"])
    assert result.exit_code == 0, result.output
    assert "network grid" in result.output
    return tmp_path / "networks" / "grid.npz"


def test_import_keeps_the_largest_strongly_connected_drivable_part(imported: Path) -> None:
    net = RoadNetwork(imported)
    # The grid's 25 crossings less its 4 corners, which join two streets only and merge
    # into the edges around them.
    assert net.size == 21
    far = [(lat, lon) for lat, lon in net.nodes if abs(lat - (LAT0 + 0.1)) < 0.01]
    assert far == []  # the island is gone
    assert min(lat for lat, _ in net.nodes) >= LAT0 - 1e-6  # the stub is gone
    # The one-way avenue (column 2) is directed northbound only.
    col = sorted((lat, i) for i, (lat, lon) in enumerate(net.nodes)
                 if abs(lon - (LON0 + 2 * STEP)) < 1e-6)
    for (_, a), (_, b) in itertools.pairwise(col):
        assert (a, b) in net.edge_of and (b, a) not in net.edge_of


def test_a_simulation_drives_on_the_imported_network(imported: Path) -> None:
    settings = read_settings({"simulator": {
        "network": "grid", "seed": 2, "vehicles": 3, "bookings_per_hour": 200,
        "duration_s": 1200, "speed": "max", "min_trip_m": 200, "demand_profile": [1.0] * 24,
        "area": {"lat": LAT0 + 2 * STEP, "lon": LON0 + 2 * STEP, "radius_m": 350}}})
    engine = Engine(1, settings, datetime(2024, 5, 6, 8, tzinfo=UTC))
    assert isinstance(engine.travel, NetworkTravel)
    events: list[dict[str, Any]] = []
    while not engine.finished:
        events.extend(engine.advance(engine.now + 60.0))
    check = NetworkCheck(RoadNetwork(imported))
    for event in events:
        check.feed(event)
    assert check.errors == []
    assert check.gps_checked > 50 and check.edges_checked > 20
    assert check.oneway_traversals > 0
    assert any(e["message_type"] == "node_status" for e in events)


def test_names_not_paths(imported: Path, tmp_path: Path) -> None:
    """A simulation names a network; paths, unknown names and bad names are a 400."""
    for bad in ("../grid", "/etc/passwd", "grid.npz", "Grid", "nope"):
        with pytest.raises(BadRequest) as info:
            read_settings({"simulator": {"network": bad}})
        assert info.value.code == "invalid_simulation_data"
    runner = CliRunner()
    again = runner.invoke(app, ["network", "import", str(tmp_path / "grid.osm.pbf"), "grid"])
    assert again.exit_code == 1 and "--force" in again.output
    reserved = runner.invoke(app, ["network", "import", str(tmp_path / "grid.osm.pbf"),
                                   "gothenburg"])
    assert reserved.exit_code == 1
    assert SimulatorSettings(network="grid").network == "grid"
