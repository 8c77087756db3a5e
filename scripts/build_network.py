"""Build a compact drivable road network from overpass GeoJSON (reproducible).

Usage: python scripts/build_network.py [GEOJSON] [OUT.npz]

Without arguments it fetches ``geojson-path-finder@2.1.0`` with ``npm pack`` into a temporary
directory, reads ``test/large-network.json`` (a 2016 Gothenburg extract of OpenStreetMap, ODbL,
© OpenStreetMap contributors) and writes src/ridecast/simulator/core/networks/gothenburg.npz.
The conversion itself lives in ``ridecast.simulator.core.network_build`` (also used by
``ridecast network import``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from ridecast.simulator.core.network_build import build_from_geojson

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "src/ridecast/simulator/core/networks/gothenburg.npz"


def fetch_gothenburg(tmp: Path) -> dict[str, object]:
    subprocess.run(["npm", "pack", "geojson-path-finder@2.1.0"], cwd=tmp, check=True,
                   capture_output=True)
    with tarfile.open(tmp / "geojson-path-finder-2.1.0.tgz") as tar:
        member = tar.extractfile("package/test/large-network.json")
        assert member is not None
        return json.load(member)  # type: ignore[no-any-return]


def main() -> None:
    if len(sys.argv) > 1:
        data = json.loads(Path(sys.argv[1]).read_text())
        out = Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_OUT
    else:
        with tempfile.TemporaryDirectory() as tmp:
            data = fetch_gothenburg(Path(tmp))
        out = DEFAULT_OUT
    stats = build_from_geojson(data, out)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
