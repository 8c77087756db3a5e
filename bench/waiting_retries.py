"""One simulation's webhooks while another endpoint holds many deliveries waiting for a retry,
through ``ridecast serve``.

Runs on 127.0.0.1 only (SQLite in a temporary directory; PostgreSQL on fresh databases,
dropped afterwards, unless ``--postgres ''``)::

    python bench/waiting_retries.py                       # 400,000 deliveries waiting
    python bench/waiting_retries.py --base-src /tmp/before/src   # beside another tree

A ``ridecast serve`` per store holds two unordered simulations. One sends its webhooks to a
live receiver (``bench/webhooks.py``'s): events are posted to it at ``--rate`` a second for
``--seconds``, twice. Between the two phases, ``--waiting`` deliveries of the other
simulation are written straight into the store, to an endpoint that was down for hours:
each waits for its next try in an hour, as a receiver's outage leaves them. The first
phase is the reference in the same server.

Printed per phase: the live simulation's delivery latency (stored to received, p50 and
p99), the server's mean claim transaction (its ``/metrics``), CPU per delivery (the
server's, and PostgreSQL's processes'), and the dashboard's poll of the live simulation's
delivery log (``delivery_log.py``'s five pages, ``--polls`` times after the phase); then the
second phase over the first (1.0: the waiting deliveries cost the others nothing). With
``--base-src``, the same on a second server run from that tree (its own store, migrated by
it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _load import (
    SERIES,
    contender_args,
    contender_stores,
    drop_pg_database,
    free_port,
    make_user_child,
    spawn,
    wait_http,
)
from delivery_log import poll
from sqlalchemy import text

from webhooks import (
    histogram_totals,
    paced,
    pct,
    postgres_cpu,
    process_cpu_s,
    store_parts,
    wait_count,
)

DOWN_URL = "http://127.0.0.1:9/down"
_FILL = ("INSERT INTO webhook_deliveries (event_id, simulation_id, message_type, url, status, "
         "attempt_count, next_attempt_at, created_at, updated_at, ordered) "
         "SELECT g, :sim, 'vehicle_use', :url, 'pending', 3, :next, :at, :at, {false} "
         "FROM {series}")

async def fill(url: str, sim: int, rows: int) -> None:
    """``rows`` unordered deliveries of ``sim`` to ``DOWN_URL``, each waiting for its fourth
    try in an hour, straight into the store, and on disk (a checkpoint)."""
    from ridecast.store.engine import create_engine

    engine = create_engine(url)
    now = time.time()
    try:
        dialect = engine.dialect.name
        async with engine.begin() as conn:
            await conn.execute(text(_FILL.format(
                false="false" if dialect == "postgresql" else "0", series=SERIES[dialect])),
                {"n": rows, "sim": sim, "url": DOWN_URL, "next": now + 3600, "at": now - 7200})
        # Written out before the second phase, so that it does not pay for this write.
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            if dialect == "postgresql":
                await conn.execute(text("VACUUM ANALYZE webhook_deliveries"))
                await conn.execute(text("CHECKPOINT"))
            else:
                await conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
    finally:
        await engine.dispose()


def phase(base: str, auth: tuple[str, str], rport: int, sim: int, server_pid: int,
          postgres: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Events posted to ``sim`` at the steady rate until all are received: latency, claims,
    CPU per delivery."""
    httpx.post(f"http://127.0.0.1:{rport}/reset")
    totals = histogram_totals(base)
    cpu = process_cpu_s(server_pid) or 0.0
    pg = postgres_cpu() if postgres else {}
    sent = asyncio.run(paced(base, auth, sim, args.rate, args.seconds))
    wait_count(rport, sent, time.time() + 120)
    cpu = (process_cpu_s(server_pid) or 0.0) - cpu
    pg_s = sum(v - pg.get(pid, 0.0) for pid, v in postgres_cpu().items()) if postgres else 0.0
    latency = httpx.get(f"http://127.0.0.1:{rport}/stats", timeout=30).json()["latency"]
    claims = [(mean, count) for label, mean, count in store_parts(totals, histogram_totals(base))
              if label == "claim transaction"]
    return {"p50": pct(latency, 0.5) * 1e3, "p99": pct(latency, 0.99) * 1e3,
            "claim_ms": claims[0][0] if claims else float("nan"),
            "claims": claims[0][1] if claims else 0,
            "cpu_us": cpu / sent * 1e6, "pg_us": pg_s / sent * 1e6}


def log_poll_ms(base: str, auth: tuple[str, str], sim: int, polls: int) -> float:
    """The dashboard's poll of ``sim``'s delivery log (``delivery_log.poll``: five pages),
    median of ``polls``, in ms."""
    with httpx.Client(base_url=base, auth=auth, timeout=60) as client:
        return statistics.median(poll(client, sim) for _ in range(polls)) * 1e3


def contender(name: str, url: str, src: str, rport: int, tmp: Path,
              args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """One server on its own store: both phases, printed."""
    env = {**os.environ, "RIDECAST_DATABASE_URL": url, "RIDECAST_LOG_LEVEL": "warning",
           "RIDECAST_WEBHOOK_ALLOW_PRIVATE": "true"}
    if src:
        env["PYTHONPATH"] = src
    key = subprocess.run([sys.executable, __file__, "--make-user", url], env=env, check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()[-1]
    auth = ("bench", key)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = spawn(["-m", "ridecast.cli.main", "serve", "--port", str(port)], env=env,
                   cwd=str(tmp))
    postgres = url.startswith("postgresql")
    try:
        wait_http(port, "/healthz")
        sims = {}
        for label, hook in (("live", f"http://127.0.0.1:{rport}/hook"), ("down", DOWN_URL)):
            sims[label] = int(httpx.post(f"{base}/api/v2/simulation", auth=auth, json={
                "name": label, "data": {"messaging_webhook_url": hook,
                                        "messaging_webhook_message_types": ["vehicle_use"],
                                        "messaging_webhook_ordering": "unordered"}},
                timeout=30).json()["id"])
        sent = asyncio.run(paced(base, auth, sims["live"], args.rate, 1.0))  # warm-up
        wait_count(rport, sent, time.time() + 60)
        results = {"without": phase(base, auth, rport, sims["live"], server.pid, postgres,
                                    args)}
        results["without"]["log_ms"] = log_poll_ms(base, auth, sims["live"], args.polls)
        started = time.perf_counter()
        asyncio.run(fill(url, sims["down"], args.waiting))
        print(f"  {name}: {args.waiting:,} deliveries waiting for a retry stored in "
              f"{time.perf_counter() - started:.1f} s")
        results["with"] = phase(base, auth, rport, sims["live"], server.pid, postgres, args)
        results["with"]["log_ms"] = log_poll_ms(base, auth, sims["live"], args.polls)
    finally:
        server.terminate()
        server.wait(timeout=30)
    for label, r in results.items():
        print(f"  {name:8s} {label:7s} waiting: latency p50 {r['p50']:7.1f} ms, p99 "
              f"{r['p99']:7.1f} ms; claim {r['claim_ms']:6.2f} ms ({r['claims']}); "
              f"CPU per delivery {r['cpu_us']:6.0f} µs"
              + (f" + PostgreSQL's {r['pg_us']:5.0f} µs" if postgres else "")
              + f"; its delivery log's poll {r['log_ms']:6.1f} ms")
    w, wo = results["with"], results["without"]
    print(f"  {name}: with / without: p99 {w['p99'] / wo['p99']:.2f}, claim "
          f"{w['claim_ms'] / wo['claim_ms']:.2f}, CPU per delivery "
          f"{(w['cpu_us'] + w['pg_us']) / (wo['cpu_us'] + wo['pg_us']):.2f}, delivery log's "
          f"poll {w['log_ms'] / wo['log_ms']:.2f}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waiting", type=int, default=400_000)
    parser.add_argument("--rate", type=int, default=200, help="events a second, steady")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--polls", type=int, default=7,
                        help="polls of the live simulation's delivery log after each phase")
    contender_args(parser)
    args = parser.parse_args()
    if args.make_user:
        make_user_child(args.make_user)
        return
    names = ["ridecast", *(["base"] if args.base_src else [])]
    srcs = {"ridecast": "", "base": args.base_src}
    rport = free_port()
    receiver = subprocess.Popen([sys.executable, str(Path(__file__).with_name("webhooks.py")),
                                 "--receiver-child", str(rport)], stdout=subprocess.PIPE,
                                text=True)
    created: list[str] = []
    try:
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "READY"
        with tempfile.TemporaryDirectory() as tmp:
            stores, made = contender_stores(names, Path(tmp), args.postgres,
                                            "ridecast_bench_waiting")
            created += made
            for store, urls in stores.items():
                print(f"{store}:")
                for name, url in urls.items():
                    contender(name, url, srcs[name], rport, Path(tmp), args)
        print("webhooks beside deliveries waiting for a retry: done")
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)
        for db in created:
            drop_pg_database(args.postgres, db)


if __name__ == "__main__":
    main()
