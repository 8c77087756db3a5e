"""How well a fleet serves the demo's demand: the demo's settings with other fleet sizes and
request rates, run by the engine alone (no server), and the KPIs a visitor sees.

    python bench/demo_sizing.py                       # the demo, and the sizing it replaced
    python bench/demo_sizing.py --runs 40:180,60:240 --hours 4

Each run is ``vehicles:bookings_per_hour`` on top of ``ridecast demo``'s ``DEMO_SIMULATOR``
(seed, area, flat demand and traffic), started at 00:00 UTC (with the demo's flat profiles
the hour does not matter). The table gives the ``measured`` KPIs (after the warm-up): the
share of requests served (dropped off), refused for lack of a vehicle (``no_offer``), turned
down or left to expire by the rider, the wait for pickup, the occupancy; and the dashboard's
*refused: no offer* tile (the whole run, warm-up included). docs/simulator.md, "Sizing a
fleet", explains how they relate; the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import Any

from ridecast.cli.demo import simulation_data
from ridecast.simulator.core.engine import Engine
from ridecast.simulator.core.kpis import compute
from ridecast.simulator.core.settings import read_settings

DEFAULT_RUNS = "30:360,40:180"  # the sizing before issue 35 item 10, and the demo's now


def run(vehicles: int, per_hour: int, hours: float) -> dict[str, Any]:
    data = simulation_data(1.0)
    data["simulator"].update({"vehicles": vehicles, "bookings_per_hour": per_hour})
    engine = Engine(1, read_settings(data), datetime(2026, 1, 1, tzinfo=UTC))
    started = time.process_time()
    engine.advance(hours * 3600.0)
    kpis = compute(engine)
    return {**kpis, "cpu_s": time.process_time() - started}


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=DEFAULT_RUNS,
                        help="comma-separated vehicles:bookings_per_hour (default %(default)s)")
    parser.add_argument("--hours", type=float, default=2.5,
                        help="simulated hours per run (the first 15 minutes are warm-up)")
    args = parser.parse_args()
    header = (f"{'fleet':>5} {'req/h':>5} {'requests':>8} {'served':>7} {'no veh.':>7} "
              f"{'rider no':>8} {'wait mean':>9} {'wait p95':>8} {'occup.':>6} "
              f"{'tile: no offer':>14} {'cpu s':>6}")
    rows = []
    for spec in args.runs.split(","):
        vehicles, per_hour = (int(x) for x in spec.split(":"))
        k = run(vehicles, per_hour, args.hours)
        m = k["measured"]
        req, rej = m["requests"], m["rejections"]
        wait = m["wait_s"]
        rows.append(
            f"{vehicles:>5} {per_hour:>5} {req:>8} {pct(m['served'], req):>7} "
            f"{pct(rej['no_vehicle'], req):>7} "
            f"{pct(rej['rider_rejected'] + rej['expired'], req):>8} "
            f"{(wait['mean'] or 0) / 60:>7.1f} m {(wait['p95'] or 0) / 60:>6.1f} m "
            f"{m['occupancy'] or 0:>6.2f} {pct(k['no_offer'], k['bookings']):>14} "
            f"{k['cpu_s']:>6.1f}")
    print(f"demo sizing: {args.hours:g} simulated hours per run, measured after the warm-up")
    print(header)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
