"""``ridecast network import FILE NAME``: a city's streets for the simulator, from OpenStreetMap.

Reads an ``.osm.pbf`` (or ``.osm``) extract with pyosmium (the ``osm`` extra), keeps the
drivable ways and only the largest strongly connected part of their graph (so every
request can be served and every vehicle can come back), merges degree-2 chains, and writes
``NAME.npz`` under the network directory (``$RIDECAST_NETWORK_DIR``, else
``./ridecast-data/networks``). A simulation then uses it with ``data.simulator.network:
NAME``: it names the network, never a path on the server.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from .lazy import QuietGroup

app = typer.Typer(help="Road networks for the simulator.", no_args_is_help=True,
                  cls=QuietGroup)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"ridecast: {message}", err=True)
    return typer.Exit(1)


@app.command("import")
def import_network(
    file: Annotated[Path, typer.Argument(help="OpenStreetMap extract (.osm.pbf or .osm).")],
    name: Annotated[str, typer.Argument(help="Network name: lowercase letters, digits, - _.")],
    force: Annotated[bool, typer.Option("--force", help="Replace a network of that name.")]
    = False,
) -> None:
    """Import a city's drivable streets as a simulator network named NAME."""
    from ..simulator.core.network_build import build, ways_from_osm
    from ..simulator.core.settings import NETWORK_NAME, NETWORKS, network_dir

    if name in NETWORKS or not NETWORK_NAME.fullmatch(name):
        raise _fail(f"network name {name!r}: use 1-64 of a-z 0-9 - _ (starting with a letter "
                    f"or digit), not {', '.join(sorted(NETWORKS))}")
    if not file.is_file():
        raise _fail(f"no file {file}")
    target = network_dir() / f"{name}.npz"
    if target.exists() and not force:
        raise _fail(f"network {name!r} exists ({target}); --force replaces it")
    try:
        import osmium  # noqa: F401
    except ImportError:
        raise _fail("reading OpenStreetMap files needs pyosmium: "
                    "pip install 'ridecast[osm]'") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".npz.tmp")
    os.close(fd)
    try:
        counts = build(ways_from_osm(file), Path(tmp))
        os.replace(tmp, target)  # atomic: a running simulation never sees half a file
    except (ValueError, RuntimeError) as exc:
        raise _fail(f"cannot import {file}: {exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    typer.echo(f"network {name}: {counts['nodes']:,} junctions, {counts['edges']:,} directed "
               f"edges (largest strongly connected part: {counts['scc_nodes']:,} of "
               f"{counts['raw_nodes']:,} nodes) -> {target}")
    typer.echo(f'use it with data.simulator.network: "{name}"')
