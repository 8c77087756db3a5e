"""Ingest throughput and latency of ridecast, side by side with two references.

    python bench/ingest.py [--seconds 5] [--connections 16]

For batches of 1 and of 100 events, every server gets the same keep-alive load (real HTTP on
loopback, the load generator in this process, each server in its own). Printed: events/s
accepted, requests/s, p50/p99 latency, and ridecast's ratio to:

* the ceiling: a bare ASGI endpoint that only reads the body (no validation, no storage);
* naive durable: json + aiosqlite with one commit per request (what group commit replaces).

Each figure is one run on this machine; compare ratios, not absolute numbers, across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _load import basic_auth, cpu_seconds, free_port, run_load, spawn, wait_http

from ridecast.events.examples import all_examples


def create_user_and_sim(db_url: str, port: int) -> tuple[str, str, int]:
    import httpx

    from ridecast.store.accounts import AccountStore
    from ridecast.store.engine import create_engine

    async def make() -> str:
        engine = create_engine(db_url)
        try:
            _principal, key = await AccountStore(engine).create_user("bench", "bench")
            return key
        finally:
            await engine.dispose()

    key = asyncio.run(make())
    sim = httpx.post(f"http://127.0.0.1:{port}/api/v2/simulation", auth=("bench", key),
                     json={"name": "bench", "data": {}}).json()["id"]
    return "bench", key, int(sim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per scenario")
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ridecast-bench-"))
    db_url = f"sqlite+aiosqlite:///{tmp / 'ridecast.db'}"
    env = {**os.environ, "RIDECAST_DATABASE_URL": db_url, "RIDECAST_LOG_LEVEL": "warning",
           "RIDECAST_MAX_BODY_BYTES": str(8 * 1024 * 1024)}
    ports = {"ridecast": free_port(), "ceiling": free_port(), "naive": free_port()}
    refs = Path(__file__).resolve().parent / "_ingest_refs.py"
    procs = {
        "ridecast": spawn(["-m", "ridecast.cli.main", "serve", "--port",
                           str(ports["ridecast"])], env=env, cwd=str(tmp)),
        "ceiling": spawn([str(refs), "ceiling", str(ports["ceiling"])]),
        "naive": spawn([str(refs), "naive", str(ports["naive"]), str(tmp / "naive.db")]),
    }
    try:
        wait_http(ports["ridecast"], "/healthz")
        wait_http(ports["ceiling"], "/")
        wait_http(ports["naive"], "/")
        user, key, sim = create_user_and_sim(db_url, ports["ridecast"])
        auth = {"Authorization": basic_auth(user, key)}
        examples = all_examples(sim)
        print(f"ingest bench: {args.connections} keep-alive connections, {args.seconds:.0f} s "
              "per scenario, 2-core machine, server and load generator share it")
        results: dict[tuple[str, int], float] = {}
        for batch in (1, 100):
            events = [examples[i % len(examples)] for i in range(batch)]
            body = json.dumps(events[0] if batch == 1 else events).encode()
            print(f"\nbatch of {batch} ({len(body)} bytes per request)")
            for name, path, headers in (
                ("ceiling", "/ingest", {}),
                ("naive", "/ingest", {}),
                ("ridecast", f"/api/v2/simulation/{sim}/events", auth),
            ):
                cpu_before = cpu_seconds(procs[name].pid)
                result = asyncio.run(run_load(ports[name], "POST", path, body, headers,
                                              connections=args.connections,
                                              seconds=args.seconds))
                cpu = (cpu_seconds(procs[name].pid) - cpu_before) / result.seconds
                bad = {s: n for s, n in result.statuses.items() if s != 201}
                results[(name, batch)] = result.rps * batch
                print(f"  {name:9s} {result.summary(batch)}  server CPU {cpu:4.0%}"
                      + (f"  NON-201: {bad}" if bad else ""))
            ours = results[("ridecast", batch)]
            print(f"  ridecast / ceiling = {ours / results[('ceiling', batch)]:.2f}   "
                  f"ridecast / naive = {ours / results[('naive', batch)]:.2f}")
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=15)


if __name__ == "__main__":
    main()
