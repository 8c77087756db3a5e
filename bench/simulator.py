"""Simulator benchmark: 500 vehicles, 10,000 bookings, 4 simulated hours, as fast as possible.

Runs each travel model of ``--networks`` (default: the bundled Gothenburg road network, then
the straight-line model) on the same demand in one run, reports both, then a summary with the
first model's figures over the second's and the issue's targets (end to end >= 100x real
time, scheduler p99 <= 10 ms on the network).

End to end is what a user runs: a ``ridecast serve`` process (SQLite by default, or
``--database-url``), the simulation created and started through the REST API, every event
published through the server's ingest into its event log. Prints the simulated-time /
wall-time ratio end to end, the engine alone in this process (same seed, no ingest: the
reference), scheduler decision time p50/p99 per booking, and events per second.

    python bench/simulator.py                      # full size
    python bench/simulator.py --vehicles 50 --bookings 1000 --hours 1   # quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from _load import cpu_seconds, free_port, make_user, wait_http

from ridecast.simulator import Engine, SimulatorSettings

START = datetime(2024, 5, 6, 6, 0, tzinfo=UTC)


def simulator_data(args: argparse.Namespace, network: str) -> dict[str, Any]:
    hours = args.hours
    return {
        "performance_tracker_enabled": not args.no_tracker,
        "simulator": {
            "seed": args.seed, "vehicles": args.vehicles, "capacity": 4,
            "bookings_per_hour": args.bookings / hours, "duration_s": hours * 3600.0,
            # Flat in time, so that --bookings is the number of requests.
            "demand_profile": [1.0] * 24,
            "speed": "max", "start_ts": START.isoformat(),
            "area": {"lat": 57.705, "lon": 11.963, "radius_m": args.radius_m},
            "network": network,
            "gps_interval_s": args.gps_interval_s,
        },
    }


def engine_only(data: dict[str, Any]) -> tuple[float, float, int]:
    settings = SimulatorSettings.model_validate(
        {**data["simulator"], "performance_tracker_enabled": data["performance_tracker_enabled"]})
    engine = Engine(1, settings, START)
    began = time.perf_counter()
    events = 0
    while not engine.finished:
        events += len(engine.advance(engine.now + 60.0))
    return engine.now, time.perf_counter() - began, events


def end_to_end(data: dict[str, Any], database_url: str, cwd: Path) -> dict[str, Any]:
    """Run the simulation as a user does: ``ridecast serve``, create the simulation with
    ``data``, ``POST .../simulator/start``, and poll ``GET .../simulator`` until it ends.

    The simulator publishes every event through the server's ingest into its event log;
    the wall time runs from the start request to the first poll that sees it finished
    (polls every 0.2 s, so at most that much is added).
    """
    key = asyncio.run(make_user(database_url))
    port = free_port()
    env = {**os.environ, "RIDECAST_DATABASE_URL": database_url, "RIDECAST_LOG_LEVEL": "warning"}
    server = subprocess.Popen([sys.executable, "-m", "ridecast.cli.main", "serve", "--port",
                               str(port)], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_http(port, "/healthz", timeout=60)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=("bench", key),
                          timeout=60) as http:
            created = http.post("/api/v2/simulation", json={"name": "bench", "data": data})
            created.raise_for_status()
            sim = created.json()["id"]
            cpu_at_start = cpu_seconds(server.pid)
            began = time.perf_counter()
            http.post(f"/api/v2/simulation/{sim}/simulator/start").raise_for_status()
            while True:
                status = http.get(f"/api/v2/simulation/{sim}/simulator").json()
                if status["status"] not in ("running", "paused"):
                    break
                time.sleep(0.2)
            wall = time.perf_counter() - began
            cpu = cpu_seconds(server.pid) - cpu_at_start
            health = http.get("/healthz").json()
    finally:
        server.terminate()
        server.wait(30)
    sim_s = (datetime.fromisoformat(status["sim_ts"])
             - datetime.fromisoformat(status["started_sim_ts"])).total_seconds()
    return {"wall_s": wall, "sim_s": sim_s, "cpu_s": cpu, "kpis": status["kpis"],
            "log_bounds": (int(health["oldest_event_id"]), int(health["last_event_id"])),
            "status": status["status"], "error": status.get("error")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vehicles", type=int, default=500)
    parser.add_argument("--bookings", type=int, default=10_000)
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--radius-m", type=float, default=5000.0)
    parser.add_argument("--networks", default="gothenburg,straight",
                        help="comma-separated data.simulator.network values, run in turn")
    parser.add_argument("--gps-interval-s", type=float, default=10.0)
    parser.add_argument("--no-tracker", action="store_true",
                        help="performance_tracker_enabled false (no vehicle_arrival events)")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--skip-engine-only", action="store_true")
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    for network in args.networks.split(","):
        print(f"== network {network}")
        figures[network] = run_one(args, simulator_data(args, network))
    compare(figures)


def compare(figures: dict[str, dict[str, float]]) -> None:
    """Each model beside the first, as ratios, and the issue's targets for the network."""
    names = list(figures)
    keys = ("engine_x", "end_to_end_x", "per_cpu_x", "p50_ms", "p99_ms")
    print("== summary")
    print(f"{'model':12}" + "".join(f"{k:>14}" for k in keys))
    for name in names:
        row = figures[name]
        print(f"{name:12}" + "".join(f"{row.get(k, math.nan):14.2f}" for k in keys))
    if len(names) > 1:
        base, other = figures[names[0]], figures[names[1]]
        print(f"{names[0]}/{names[1]}" + "".join(
            f"{base.get(k, math.nan) / other.get(k, math.nan):14.2f}" for k in keys))
    if "gothenburg" in figures:
        row = figures["gothenburg"]
        print(f"target (gothenburg): end to end >= 100x: {row['end_to_end_x'] >= 100}; "
              f"scheduler p99 <= 10 ms: {row['p99_ms'] <= 10}")


def run_one(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, float]:
    figures: dict[str, float] = {}
    if not args.skip_engine_only:
        sim_s, wall_s, events = engine_only(data)
        figures["engine_x"] = sim_s / wall_s
        print(f"engine only : {sim_s / wall_s:8.0f}x  ({sim_s:.0f} sim s in {wall_s:.1f} s, "
              f"{events / wall_s:,.0f} events/s)")

    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        result = end_to_end(data, url, Path(tmp))
    k = result["kpis"]
    events = k["events"]
    print(f"end to end  : {result['sim_s'] / result['wall_s']:8.0f}x  ({result['sim_s']:.0f} sim s "
          f"in {result['wall_s']:.1f} s; status {result['status']}, {result['error'] or 'ok'})")
    print(f"server CPU  : {result['cpu_s']:.1f} s ({result['sim_s'] / result['cpu_s']:.0f}x real "
          f"time per CPU second; {100 * result['cpu_s'] / result['wall_s']:.0f}% of the wall time)")
    print(f"events      : {events:,} produced, {events / result['wall_s']:,.0f} events/s "
          f"through ingest; log ids {result['log_bounds']}")
    print(f"scheduler   : p50 {k['scheduler_decision_ms_p50']} ms, "
          f"p99 {k['scheduler_decision_ms_p99']} ms over {k['scheduler_decisions']} decisions")
    summary = {key: k[key] for key in ("bookings", "served", "no_offer", "rejected_rate",
                                       "no_shows", "cancellations", "wait_mean_s", "wait_p95_s",
                                       "ride_over_direct_mean", "occupancy", "vehicle_km",
                                       "empty_km")}
    print("kpis        :", json.dumps(summary))
    figures["end_to_end_x"] = result["sim_s"] / result["wall_s"]
    figures["per_cpu_x"] = result["sim_s"] / result["cpu_s"]
    figures["p50_ms"] = k["scheduler_decision_ms_p50"] or math.nan
    figures["p99_ms"] = k["scheduler_decision_ms_p99"] or math.nan
    return figures


if __name__ == "__main__":
    main()
