"""Ingest throughput and latency of ridecast, side by side with its references.

    python bench/ingest.py [--seconds 5] [--connections 32] [--postgres URL|''] [--generator auto]

For batches of 1 and of 100 events, every server gets the same keep-alive load from the same
load generator, in a process of its own (bench/_loadgen.py: Debian's ``wrk`` when installed,
else a lean asyncio client; one request in flight per connection), real HTTP on loopback,
each server in its own process. Printed per contender: events/s accepted, requests/s, p50
and p99 latency of one POST under that load, the server's CPU per event and the generator's
CPU per request. The contenders:

* wire: a bare asyncio protocol answering a fixed 201, no framework: what the generator can
  drive here. Its rate must be well above every other contender's (the bench prints the
  ratio), or the generator, not the server, is what the figures measure;
* ceiling: a bare ASGI endpoint (Starlette on uvicorn) that only reads the body;
* naive: json + aiosqlite with one commit per request (what group commit replaces);
* ridecast on SQLite;
* with ``--postgres``: naive-pg (json + asyncpg, one transaction per request, a pool of one
  connection per client connection) and ridecast on PostgreSQL, in a fresh database of that
  server (dropped after);
* with ``--base-src``: base (and base-pg), ridecast from another source tree, for an A/B of
  a change in the same run;
* with ``--access-log``: ridecast+log, ridecast with its access log on;
* with ``--synchronous-full``: ridecast+full, SQLite with ``synchronous=FULL``;
* with ``--credentials``: ridecast-token and ridecast-bearer, the same server as ridecast
  (which sends HTTP Basic) with ``Authorization: Token <api_key>`` and ``Bearer <token>``.

Every ridecast contender runs with its default settings (its store's address aside); the
bench prints, for each, which settings it changes and their defaults.

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
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _loadgen
from _load import (
    basic_auth,
    cpu_seconds,
    create_pg_database,
    drop_pg_database,
    free_port,
    make_user,
    say_changed_defaults,
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


# The contenders that are ridecast (``base``: ``--base-src``), and (ridecast contender, its
# reference) for the ratio lines.
OURS = {"ridecast", "ridecast-pg", "base", "base-pg", "ridecast+log", "ridecast+full"}
PAIRS = [("ridecast", "naive"), ("ridecast-pg", "naive-pg"), ("base", "naive"),
         ("base-pg", "naive-pg"), ("ridecast", "base"), ("ridecast-pg", "base-pg"),
         ("ridecast+log", "ridecast"), ("ridecast+full", "ridecast"),
         ("ridecast-token", "ridecast"), ("ridecast-bearer", "ridecast")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="per scenario and contender (wrk takes whole seconds)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin URL of a PostgreSQL server: ridecast and the naive asyncpg "
                        "endpoint on it are measured beside SQLite in the same run (a fresh "
                        "database, dropped after); '' to skip")
    parser.add_argument("--generator", choices=("auto", "wrk", "python"), default="auto",
                        help="the load generator (auto: wrk when installed)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every contender this many times per scenario, each round "
                        "in another order; rates are over all rounds, p50 and p99 the "
                        "median of the rounds' (use 3 or more on a machine shared with "
                        "other work)")
    parser.add_argument("--base-src", default="",
                        help="a ridecast source tree (its src/ directory) to measure as "
                        "'base', beside this one in the same run (for an A/B of a change): "
                        "on SQLite, and on PostgreSQL too with --postgres")
    parser.add_argument("--access-log", action="store_true",
                        help="also measure 'ridecast+log': ridecast with its access log on "
                        "(RIDECAST_ACCESS_LOG=true), to show what a line per request costs")
    parser.add_argument("--synchronous-full", action="store_true",
                        help="also measure 'ridecast+full': SQLite with "
                        "RIDECAST_SQLITE_SYNCHRONOUS=full (no committed event lost on power "
                        "loss)")
    parser.add_argument("--credentials", action="store_true",
                        help="also send ridecast's requests with 'Authorization: Token "
                        "<api_key>' (ridecast-token) and 'Bearer <token>' (ridecast-bearer), "
                        "to the same server as HTTP Basic (ridecast)")
    args = parser.parse_args()
    pg_db = f"ridecast_bench_{os.getpid()}"
    pg_url = create_pg_database(args.postgres, pg_db) if args.postgres else None

    tmp = Path(tempfile.mkdtemp(prefix="ridecast-bench-"))
    db_url = f"sqlite+aiosqlite:///{tmp / 'ridecast.db'}"
    # ridecast as a user runs it: every setting at its default but the store's address.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RIDECAST_")},
           "RIDECAST_DATABASE_URL": db_url}
    refs = Path(__file__).resolve().parent / "_ingest_refs.py"
    serve = ["-m", "ridecast.cli.main", "serve", "--port"]
    ports: dict[str, int] = {}
    commands: dict[str, tuple[list[str], dict[str, str] | None]] = {}

    def contender(name: str, args_for: list[str], env_for: dict[str, str] | None = None,
                  ) -> None:
        ports[name] = free_port()
        commands[name] = ([str(ports[name]) if a == "PORT" else a for a in args_for], env_for)

    contender("wire", [str(refs), "wire", "PORT"])
    contender("ceiling", [str(refs), "ceiling", "PORT"])
    contender("naive", [str(refs), "naive", "PORT", str(tmp / "naive.db")])
    contender("ridecast", [*serve, "PORT"], env)
    base_env = {**env, "PYTHONPATH": args.base_src,
                "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'base.db'}"}
    if args.base_src:
        contender("base", [*serve, "PORT"], base_env)
    log_env = {**env, "RIDECAST_ACCESS_LOG": "true",
               "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'logged.db'}"}
    if args.access_log:
        contender("ridecast+log", [*serve, "PORT"], log_env)
    if args.synchronous_full:
        contender("ridecast+full", [*serve, "PORT"], {
            **env, "RIDECAST_SQLITE_SYNCHRONOUS": "full",
            "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'full.db'}"})
    if pg_url is not None:
        plain_pg = pg_url.replace("postgresql+asyncpg://", "postgresql://", 1)
        contender("naive-pg", [str(refs), "naive-pg", "PORT", plain_pg,
                               str(args.connections)])
        contender("ridecast-pg", [*serve, "PORT"], {**env, "RIDECAST_DATABASE_URL": pg_url})
        if args.base_src:
            base_pg = create_pg_database(args.postgres, f"{pg_db}_base")
            assert base_pg is not None
            contender("base-pg", [*serve, "PORT"], {**base_env, "RIDECAST_DATABASE_URL": base_pg})
    procs = {name: spawn(command, env=env_for, cwd=str(tmp))
             for name, (command, env_for) in commands.items()}
    try:
        for name in procs:
            try:
                wait_http(ports[name], "/healthz" if name in OURS else "/")
            except RuntimeError as exc:
                raise RuntimeError(f"{name}: {exc}") from None
        user, key, sim = create_user_and_sim(db_url, ports["ridecast"])
        targets = {"ridecast": (f"/api/v2/simulation/{sim}/events",
                                {"Authorization": basic_auth(user, key)})}
        for name in set(procs) & OURS - {"ridecast"}:
            env_for = commands[name][1]
            assert env_for is not None
            their_user, their_key, their_sim = create_user_and_sim(
                env_for["RIDECAST_DATABASE_URL"], ports[name])
            targets[name] = (f"/api/v2/simulation/{their_sim}/events",
                             {"Authorization": basic_auth(their_user, their_key)})
        for name in sorted(set(procs) & OURS):
            env_for = commands[name][1]
            assert env_for is not None
            say_changed_defaults(f"{name} runs with", env_for)
        # The other credentials of ridecast's user, on the same server process.
        aliases: dict[str, str] = {}
        if args.credentials:
            import httpx

            token = httpx.get(f"http://127.0.0.1:{ports['ridecast']}/api/v2/user/token/",
                              auth=(user, key)).json()["token"]
            path = targets["ridecast"][0]
            targets["ridecast-token"] = (path, {"Authorization": f"Token {key}"})
            targets["ridecast-bearer"] = (path, {"Authorization": f"Bearer {token}"})
            aliases = {"ridecast-token": "ridecast", "ridecast-bearer": "ridecast"}
        examples = all_examples(sim)
        generator = _loadgen.tool(args.generator)
        print(f"ingest bench: {args.connections} keep-alive connections, one request in flight "
              f"on each, {args.seconds:g} s per contender and round, {args.rounds} "
              f"round(s), generator {generator} in its own "
              f"process; {os.cpu_count()} cores shared by the servers and the generator; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start")
        for batch in (1, 100):
            events = [examples[i % len(examples)] for i in range(batch)]
            body = json.dumps(events[0] if batch == 1 else events).encode()
            print(f"\nbatch of {batch} ({len(body)} bytes per request)")
            names = [*procs, *aliases]
            rounds: dict[str, list[_loadgen.GenResult]] = {name: [] for name in names}
            cpu = dict.fromkeys(names, 0.0)
            written = dict.fromkeys(names, 0.0)
            commits = dict.fromkeys(names, 0.0)
            for round_ in range(args.rounds):
                # Each round in another order: load that drifts (other work on the
                # machine) then falls on every contender alike.
                for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                    path, headers = targets.get(name, ("/ingest", {}))
                    server = aliases.get(name, name)
                    cpu_before = cpu_seconds(procs[server].pid)
                    ours = server in OURS
                    commits_before = commit_counts(ports[server]) if ours else (0.0, 0.0)
                    rounds[name].append(_loadgen.run(
                        ports[server], path, body, headers, connections=args.connections,
                        seconds=args.seconds, choice=args.generator))
                    cpu[name] += cpu_seconds(procs[server].pid) - cpu_before
                    if ours:
                        after = commit_counts(ports[server])
                        written[name] += after[0] - commits_before[0]
                        commits[name] += after[1] - commits_before[1]
            results = {name: _loadgen.combined(runs) for name, runs in rounds.items()}
            for name, result in results.items():
                per_commit = (f"  {written[name] / max(commits[name], 1):4.0f} events/commit"
                              if aliases.get(name, name) in OURS else "")
                failed = f"  FAILED: {result.failed}" if result.failed else ""
                print(f"  {name:11s} {result.rps * batch:8.0f} ev/s {result.rps:7.0f} req/s  "
                      f"p50 {result.p50_ms:6.2f} ms  p99 {result.p99_ms:6.2f} ms  "
                      f"server CPU {cpu[name] / result.seconds:4.0%} = "
                      f"{cpu[name] / max(result.requests * batch, 1) * 1e6:5.0f} µs/event  "
                      f"generator {result.cpu_us_per_request:4.1f} µs/req"
                      f"{per_commit}{failed}")
            fastest = max(results[n].rps for n in results if n != "wire")
            print(f"  generator: wire / fastest other contender = "
                  f"{results['wire'].rps / fastest:.2f} (requests/s)")
            for ours, naive in PAIRS:
                if ours in results and naive in results:
                    mine, theirs = results[ours], results[naive]
                    print(f"  {ours} / {naive} = {mine.rps / theirs.rps:.2f}   "
                          f"p50 {mine.p50_ms:.2f} vs {theirs.p50_ms:.2f} ms   "
                          f"p99 {mine.p99_ms:.2f} vs {theirs.p99_ms:.2f} ms   "
                          f"{ours} / ceiling = {mine.rps / results['ceiling'].rps:.2f}")
            if "ridecast-pg" in results:
                print(f"  ridecast on PostgreSQL / on SQLite = "
                      f"{results['ridecast-pg'].rps / results['ridecast'].rps:.2f}")
    finally:
        for proc in procs.values():
            proc.terminate()
        for name, proc in procs.items():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:  # said, killed, and the databases dropped
                print(f"({name} did not stop within 15 s of SIGTERM: killed)")
                proc.kill()
                proc.wait()
        if pg_url is not None:
            drop_pg_database(args.postgres, pg_db)
            drop_pg_database(args.postgres, f"{pg_db}_base")


if __name__ == "__main__":
    main()
