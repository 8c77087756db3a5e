"""``ridecast simulator``: a process that only runs simulator runs, for a cluster's API nodes.

Run it next to ``ridecast serve`` nodes started with ``RIDECAST_SIMULATOR_HOST=false`` (or
``--no-simulator``), on the same ``RIDECAST_DATABASE_URL`` and Redis bus. It serves no
HTTP: it takes the starts the API nodes offer on the bus, owns those runs (their leases,
journals and snapshots), computes them in its engine processes and publishes their events
to the shared event log and bus, from which every API node streams them. Commands sent to
an API node reach it over the bus; when it stops, another simulator process takes its runs
over (SIGTERM hands them over at once; a crash, after their lease).
"""

from __future__ import annotations

import logging
import sys

from .process import exit_despite_lingering_threads
from .worker import run_on_best_loop, serve_until_signalled, store_address


async def run_simulator() -> None:
    """Host simulator runs until SIGINT or SIGTERM."""
    from ..app import open_runtime
    from ..config import get_settings

    settings = get_settings()
    runtime = await open_runtime(settings, serve_streams=False, run_simulator=True,
                                 run_dispatcher=False, host_runs=True)
    node = getattr(runtime.simulator, "node_id", "?")
    # Bounded: a run not handed over by then is taken over after its lease.
    await serve_until_signalled(
        runtime, f"simulator running on {store_address(settings.database_url)} (node "
        f"{node}); stop it with Ctrl-C or SIGTERM (its runs are handed over)",
        close_timeout_s=20)


def simulator() -> None:
    """Run only simulator runs against RIDECAST_DATABASE_URL and the Redis bus (no HTTP
    API)."""
    from ..config import get_settings
    from .datadir import prepare_store

    settings = get_settings()
    if settings.bus_url.startswith("memory:"):
        print("error: ridecast simulator takes runs from the API nodes over a shared bus: set "
              "RIDECAST_BUS_URL=redis://... (the same as theirs)", file=sys.stderr)
        sys.exit(2)
    prepare_store(settings)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from . import gctuning, startlog

    startlog.quiet_pool(settings.log_level)
    gctuning.tune()
    run_on_best_loop(run_simulator())
    exit_despite_lingering_threads()
