"""Ingest throughput and latency of ridecast, side by side with two references.

    python bench/ingest.py [--seconds 5] [--connections 16]

For batches of 1 and of 100 events, every server gets the same keep-alive load (real HTTP on
loopback, the load generator in this process, each server in its own). Printed: events/s
accepted, requests/s, p50/p99 latency, and ridecast's ratio to:

* the ceiling: a bare ASGI endpoint that only reads the body (no validation, no storage);
* naive durable: json + aiosqlite with one commit per request (what group commit replaces).

For ridecast, the mean number of events per group commit in the scenario is printed too
(from its ``/metrics``: ``ridecast_eventlog_events_total`` over ``..._commits_total``).

Each figure is one run on this machine; compare ratios, not absolute numbers, across machines.
Server CPU per event (CPU seconds of the server process / events accepted) is the figure
least disturbed by other load on a small machine: compare it when events/s are noisy.
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

from _load import (
    basic_auth,
    cpu_seconds,
    create_pg_database,
    drop_pg_database,
    free_port,
    make_user,
    run_load,
    spawn,
    wait_http,
)

from ridecast.events.examples import all_examples


def commit_counts(port: int) -> tuple[float, float]:
    """(events written, group commits) so far, from ridecast's ``/metrics``."""
    import httpx

    counts = {"ridecast_eventlog_events_total": 0.0, "ridecast_eventlog_commits_total": 0.0}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics").text.splitlines():
        name, _sep, value = line.partition(" ")
        if name in counts:
            counts[name] = float(value)
    return counts["ridecast_eventlog_events_total"], counts["ridecast_eventlog_commits_total"]


def create_user_and_sim(db_url: str, port: int) -> tuple[str, str, int]:
    import httpx

    key = asyncio.run(make_user(db_url))
    sim = httpx.post(f"http://127.0.0.1:{port}/api/v2/simulation", auth=("bench", key),
                     json={"name": "bench", "data": {}}).json()["id"]
    return "bench", key, int(sim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per scenario")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin URL of a PostgreSQL server: ridecast on it is measured "
                        "beside SQLite in the same run (a fresh database, dropped after); "
                        "'' to skip")
    args = parser.parse_args()
    pg_db = f"ridecast_bench_{os.getpid()}"
    pg_url = create_pg_database(args.postgres, pg_db) if args.postgres else None

    tmp = Path(tempfile.mkdtemp(prefix="ridecast-bench-"))
    db_url = f"sqlite+aiosqlite:///{tmp / 'ridecast.db'}"
    env = {**os.environ, "RIDECAST_DATABASE_URL": db_url, "RIDECAST_LOG_LEVEL": "warning",
           "RIDECAST_MAX_BODY_BYTES": str(8 * 1024 * 1024)}
    ports = {"ridecast": free_port(), "ceiling": free_port(), "naive": free_port()}
    refs = Path(__file__).resolve().parent / "_ingest_refs.py"
    contenders = [("ceiling", "/ingest"), ("naive", "/ingest"), ("ridecast", "")]
    procs = {
        "ridecast": spawn(["-m", "ridecast.cli.main", "serve", "--port",
                           str(ports["ridecast"])], env=env, cwd=str(tmp)),
        "ceiling": spawn([str(refs), "ceiling", str(ports["ceiling"])]),
        "naive": spawn([str(refs), "naive", str(ports["naive"]), str(tmp / "naive.db")]),
    }
    if pg_url is not None:
        ports["ridecast-pg"] = free_port()
        procs["ridecast-pg"] = spawn(["-m", "ridecast.cli.main", "serve", "--port",
                                      str(ports["ridecast-pg"])],
                                     env={**env, "RIDECAST_DATABASE_URL": pg_url}, cwd=str(tmp))
        contenders.append(("ridecast-pg", ""))
    try:
        wait_http(ports["ridecast"], "/healthz")
        wait_http(ports["ceiling"], "/")
        wait_http(ports["naive"], "/")
        user, key, sim = create_user_and_sim(db_url, ports["ridecast"])
        auth = {"Authorization": basic_auth(user, key)}
        targets = {"ridecast": (f"/api/v2/simulation/{sim}/events", auth)}
        if pg_url is not None:
            wait_http(ports["ridecast-pg"], "/healthz")
            pg_user, pg_key, pg_sim = create_user_and_sim(pg_url, ports["ridecast-pg"])
            targets["ridecast-pg"] = (f"/api/v2/simulation/{pg_sim}/events",
                                      {"Authorization": basic_auth(pg_user, pg_key)})
        examples = all_examples(sim)
        print(f"ingest bench: {args.connections} keep-alive connections, {args.seconds:.0f} s "
              "per scenario, 2-core machine, server and load generator share it")
        results: dict[tuple[str, int], float] = {}
        cpu_per_event: dict[tuple[str, int], float] = {}
        for batch in (1, 100):
            events = [examples[i % len(examples)] for i in range(batch)]
            body = json.dumps(events[0] if batch == 1 else events).encode()
            print(f"\nbatch of {batch} ({len(body)} bytes per request)")
            for name, ref_path in contenders:
                path, headers = targets.get(name, (ref_path, {}))
                cpu_before = cpu_seconds(procs[name].pid)
                ours = name.startswith("ridecast")
                commits_before = commit_counts(ports[name]) if ours else (0.0, 0.0)
                result = asyncio.run(run_load(ports[name], "POST", path, body, headers,
                                              connections=args.connections,
                                              seconds=args.seconds))
                cpu = (cpu_seconds(procs[name].pid) - cpu_before) / result.seconds
                per_commit = ""
                if ours:
                    events, commits = (after - before for after, before in zip(
                        commit_counts(ports[name]), commits_before, strict=True))
                    per_commit = f"  {events / max(commits, 1):.0f} events/commit"
                bad = {s: n for s, n in result.statuses.items() if s != 201}
                results[(name, batch)] = result.rps * batch
                cpu_per_event[(name, batch)] = cpu / max(result.rps * batch, 1e-9) * 1e6
                print(f"  {name:9s} {result.summary(batch)}  server CPU {cpu:4.0%} "
                      f"= {cpu_per_event[(name, batch)]:5.0f} µs/event{per_commit}"
                      + (f"  NON-201: {bad}" if bad else ""))
            ours = results[("ridecast", batch)]
            print(f"  ridecast / ceiling = {ours / results[('ceiling', batch)]:.2f}   "
                  f"ridecast / naive = {ours / results[('naive', batch)]:.2f}   "
                  "server CPU per event, ridecast / naive = "
                  f"{cpu_per_event[('ridecast', batch)] / cpu_per_event[('naive', batch)]:.2f}")
            if ("ridecast-pg", batch) in results:
                print(f"  ridecast on PostgreSQL / on SQLite = "
                      f"{results[('ridecast-pg', batch)] / ours:.2f}")
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=15)
        if pg_url is not None:
            drop_pg_database(args.postgres, pg_db)


if __name__ == "__main__":
    main()
