"""What a simulator takeover costs: a node killed with SIGKILL, the other node takes over.

Two ``ridecast serve`` nodes share one store (a SQLite file by default, or a new PostgreSQL
database with ``--postgres``). A run (``--vehicles``, ``--bookings-per-hour``, flat demand,
speed "max", the bundled Gothenburg network) starts on node A; once its clock has passed
each of ``--hours`` simulated hours it is paused there, node B is started, A is killed with
SIGKILL and B takes the run over:
after A's lease (``--lease-s``) runs out, B loads the run's newest snapshot (taken every
``--snapshot-every-s`` simulated seconds), replays the journal and the simulated time after
it, and drops the events A had already published. The takeover time runs from the kill to
the first status from B that says B owns the run and has caught up (``takeover: null``);
"rebuild" is the part after B took the lease (what the snapshot shortens; the lease wait is
the same at any age). ``--no-snapshots`` turns snapshots off: the whole run is replayed, as
before snapshots existed. Prints each age's figures and the ratio of the oldest to the first.

    python bench/takeover.py                                 # 500 vehicles, 1 h and 24 h
    python bench/takeover.py --vehicles 50 --hours 1,4       # smaller
    python bench/takeover.py --quick                         # seconds (tests/test_bench_smoke.py)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from _load import create_pg_database, drop_pg_database, free_port, make_user, wait_http


def _serve(port: int, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    log = (cwd / f"node-{port}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "ridecast.cli.main", "serve", "--port",
                             str(port)], env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)


def _sim_s(status: dict[str, Any]) -> float:
    if not status.get("sim_ts") or not status.get("started_sim_ts"):
        return 0.0
    return (datetime.fromisoformat(status["sim_ts"])
            - datetime.fromisoformat(status["started_sim_ts"])).total_seconds()


def takeover_at(hours: float, args: argparse.Namespace, database_url: str,
                cwd: Path) -> dict[str, float]:
    """Run to ``hours`` simulated on node A, kill A, time node B's takeover."""
    key = asyncio.run(make_user(database_url))
    every_s = "0" if args.no_snapshots else str(args.snapshot_every_s)
    env = {**os.environ, "RIDECAST_DATABASE_URL": database_url, "RIDECAST_LOG_LEVEL": "info",
           "RIDECAST_SIMULATOR_LEASE_S": str(args.lease_s),
           "RIDECAST_SIMULATOR_SNAPSHOT_EVERY_S": every_s,
           "RIDECAST_SIMULATOR_SNAPSHOT_EVERY_EVENTS": "0"}
    ports = free_port(), free_port()
    # B starts once the run is paused at its age: alone, A keeps the run (with a short lease
    # on a loaded machine two nodes may pass a "max" run back and forth before that).
    nodes = [_serve(ports[0], env, cwd)]
    try:
        wait_http(ports[0], "/healthz", timeout=60)
        clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=("bench", key),
                                timeout=60) for port in ports]
        a, b = clients
        data = {"simulator": {
            "seed": 1, "vehicles": args.vehicles, "bookings_per_hour": args.bookings_per_hour,
            "duration_s": hours * 3600.0 + 7200.0, "speed": "max", "network": args.network,
            "demand_profile": [1.0] * 24, "congestion_profile": [1.0] * 24,
            "start_ts": "2024-05-06T06:00:00+00:00"}}
        created = a.post("/api/v2/simulation", json={"name": "takeover", "data": data})
        created.raise_for_status()
        sim = created.json()["id"]
        path = f"/api/v2/simulation/{sim}/simulator"
        a.post(f"{path}/start").raise_for_status()
        began = time.monotonic()
        while _sim_s(status := a.get(path).json()) < hours * 3600.0:
            assert status["status"] == "running", status
            time.sleep(0.2)
        # Paused there, so that the kill finds the run where it was measured (at "max" it
        # would run on meanwhile); a paused run taken over still catches up to its clock.
        a.post(f"{path}/pause").raise_for_status()
        reached = time.monotonic() - began
        owner = a.get(path).json()["owner_node"]
        nodes.append(_serve(ports[1], env, cwd))
        wait_http(ports[1], "/healthz", timeout=60)
        time.sleep(args.lease_s / 2)  # a renewal: the progress A recorded is current
        nodes[0].send_signal(signal.SIGKILL)
        nodes[0].wait(30)
        killed = time.monotonic()
        taken: float | None = None
        while True:
            status = b.get(path).json()
            new_owner = status.get("owner_node")
            if taken is None and new_owner not in (None, owner):
                taken = time.monotonic()
            if new_owner not in (None, owner) and status.get("takeover") is None:
                break
            assert status["status"] in ("paused", "running"), status
            time.sleep(0.05)
        done = time.monotonic()
        for client in clients:
            client.close()
    finally:
        for node in nodes:
            if node.poll() is None:
                node.terminate()
                try:
                    node.wait(60)
                except subprocess.TimeoutExpired:
                    node.kill()
                    node.wait(30)
    assert taken is not None
    return {"hours": hours, "reached_s": reached, "takeover_s": done - killed,
            "rebuild_s": done - taken, "sim_s": _sim_s(status)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vehicles", type=int, default=500)
    parser.add_argument("--bookings-per-hour", type=float, default=2500.0)
    parser.add_argument("--hours", default="1,24",
                        help="comma-separated simulated ages at which the owner is killed")
    parser.add_argument("--network", default="gothenburg")
    parser.add_argument("--lease-s", type=float, default=2.0)
    parser.add_argument("--snapshot-every-s", type=float, default=900.0)
    parser.add_argument("--no-snapshots", action="store_true",
                        help="snapshots off: a takeover replays the run from its start")
    parser.add_argument("--postgres", default="",
                        help="admin URL of a PostgreSQL server (a database is created); "
                             "default: a SQLite file")
    parser.add_argument("--quick", action="store_true",
                        help="5 vehicles at 0.1 h and 0.3 h, a snapshot every 300 s")
    args = parser.parse_args()
    if args.quick:
        args.vehicles, args.bookings_per_hour, args.hours = 5, 60.0, "0.1,0.3"
        args.snapshot_every_s, args.network = 300.0, "straight"
    ages = [float(h) for h in args.hours.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-takeover-") as tmp:
        for k, hours in enumerate(ages):
            cwd = Path(tmp) / f"age{k}"
            cwd.mkdir()
            name = f"bench_takeover_{uuid.uuid4().hex[:8]}"
            url = create_pg_database(args.postgres, name) if args.postgres else None
            try:
                result = takeover_at(hours, args, url or f"sqlite+aiosqlite:///{cwd / 'db'}",
                                     cwd)
            finally:
                if url:
                    drop_pg_database(args.postgres, name)
            results.append(result)
            print(f"{args.vehicles} vehicles, killed at {hours:g} h simulated (reached in "
                  f"{result['reached_s']:.1f} s): takeover {result['takeover_s']:.2f} s "
                  f"(lease {args.lease_s:g} s; rebuild and catch-up {result['rebuild_s']:.2f} "
                  f"s), snapshots {'off' if args.no_snapshots else 'on'}", flush=True)
    first, last = results[0], results[-1]
    print(f"ratio {last['hours']:g} h / {first['hours']:g} h: takeover "
          f"{last['takeover_s'] / first['takeover_s']:.2f}, rebuild "
          f"{last['rebuild_s'] / max(1e-9, first['rebuild_s']):.2f}")


if __name__ == "__main__":
    main()
