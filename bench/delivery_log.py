"""The dashboard's delivery-log poll against a long run's history, through ``ridecast serve``.

Runs on 127.0.0.1 only (SQLite in a temporary directory; PostgreSQL on fresh databases,
dropped afterwards, unless ``--postgres ''``)::

    python bench/delivery_log.py                        # 1,000,000 deliveries in one run
    python bench/delivery_log.py --base-src /tmp/before/src   # beside another source tree

A ``ridecast serve`` process per store holds two simulations: a long run with ``--rows``
deliveries and a short one with 3,000 (each: the newest 500 pending, the rest finished, one
in a thousand of them failed; written straight into the store, as a long run would have
left them). The dashboard's webhook panel asks ``GET /api/v2/simulation/{id}/
webhook_deliveries`` for five pages every few seconds (``dashboard/static/js/main.js``):
the latest 20, one pending, one failed, one succeeded, then the oldest pending ones by
offset. A keep-alive HTTP client asks the same five, for the long run and the short one in
turn, ``--polls`` times.

Printed per store: each poll's median and slowest time, and the long run's over the short
one's (the reference in the same server: 1.0 means the poll does not grow with history).
With ``--base-src``, the same on a second server run from that tree (its own store, migrated
by it), and this tree's long-run poll against that one's.
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
from sqlalchemy import text

PENDING = 500
SHORT = 3_000
_FILL = ("INSERT INTO webhook_deliveries (event_id, simulation_id, message_type, url, status, "
         "attempt_count, next_attempt_at, created_at, updated_at, ordered) "
         "SELECT g, :sim, 'vehicle_use', 'http://127.0.0.1:9/', CASE WHEN g > :n - :pending "
         "THEN 'pending' WHEN g % 1000 = 0 THEN 'failed' ELSE 'succeeded' END, 1, 0, 0, 0, "
         "{true} FROM {series}")

async def fill(url: str, sim: int, rows: int) -> None:
    """``rows`` deliveries of simulation ``sim``, straight into the store."""
    from ridecast.store.engine import create_engine

    engine = create_engine(url)
    try:
        dialect = engine.dialect.name
        async with engine.begin() as conn:
            await conn.execute(text(_FILL.format(
                true="true" if dialect == "postgresql" else "1", series=SERIES[dialect])),
                {"n": rows, "pending": min(PENDING, rows), "sim": sim})
        if dialect == "postgresql":
            async with engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text("VACUUM ANALYZE webhook_deliveries"))
    finally:
        await engine.dispose()


def poll(client: httpx.Client, sim: int) -> float:
    """The dashboard's five pages for ``sim``, as main.js asks them; the seconds taken."""
    base = f"/api/v2/simulation/{sim}/webhook_deliveries"
    started = time.perf_counter()
    pages = [client.get(f"{base}?limit=20"), client.get(f"{base}?status=pending&limit=1"),
             client.get(f"{base}?status=failed&limit=1"),
             client.get(f"{base}?status=succeeded&limit=1")]
    pending = int(pages[1].json()["meta"]["total_count"])
    pages.append(client.get(f"{base}?status=pending&limit=5&offset={max(0, pending - 5)}"))
    took = time.perf_counter() - started
    for page in pages:
        page.raise_for_status()
    return took


def contender(name: str, url: str, src: str, rows: int, polls: int, tmp: Path,
              ) -> list[float]:
    """One server on its own store: the long run's and the short one's polls, printed; the
    long run's poll times."""
    env = {**os.environ, "RIDECAST_DATABASE_URL": url, "RIDECAST_LOG_LEVEL": "warning"}
    if src:
        env["PYTHONPATH"] = src
    key = subprocess.run([sys.executable, __file__, "--make-user", url], env=env, check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()[-1]
    port = free_port()
    server = spawn(["-m", "ridecast.cli.main", "serve", "--port", str(port)], env=env,
                   cwd=str(tmp))
    try:
        wait_http(port, "/healthz")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=("bench", key),
                          timeout=60) as client:
            sims = {length: int(client.post("/api/v2/simulation", json={
                "name": f"{length}-run", "data": {}}).json()["id"])
                for length in ("long", "short")}
            started = time.perf_counter()
            asyncio.run(fill(url, sims["long"], rows))
            asyncio.run(fill(url, sims["short"], min(SHORT, rows)))
            print(f"  {name}: {rows:,} and {min(SHORT, rows):,} deliveries stored in "
                  f"{time.perf_counter() - started:.1f} s")
            times: dict[str, list[float]] = {"long": [], "short": []}
            for _ in range(polls):  # in turn, so that drift weighs on both alike
                for length, sim in sims.items():
                    times[length].append(poll(client, sim))
    finally:
        server.terminate()
        server.wait(timeout=30)
    for length, runs in times.items():
        print(f"  {name:8s} {length:5s} run: poll of 5 pages median "
              f"{statistics.median(runs) * 1e3:8.1f} ms, slowest {max(runs) * 1e3:8.1f} ms")
    print(f"  {name}: long run / short run = "
          f"{statistics.median(times['long']) / statistics.median(times['short']):.2f}")
    return times["long"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--polls", type=int, default=7)
    contender_args(parser)
    args = parser.parse_args()
    if args.make_user:
        make_user_child(args.make_user)
        return
    if args.rows <= PENDING:
        parser.error(f"--rows must be more than {PENDING}")
    names = ["ridecast", *(["base"] if args.base_src else [])]
    srcs = {"ridecast": "", "base": args.base_src}
    with tempfile.TemporaryDirectory() as tmp:
        stores, created = contender_stores(names, Path(tmp), args.postgres,
                                           "ridecast_bench_log")
        try:
            for store, urls in stores.items():
                print(f"{store}:")
                long = {name: contender(name, url, srcs[name], args.rows, args.polls,
                                        Path(tmp)) for name, url in urls.items()}
                if "base" in long:
                    ratio = statistics.median(long["base"]) / statistics.median(long["ridecast"])
                    print(f"  long run, base / ridecast = {ratio:.1f}x (medians)")
            print("delivery log, dashboard poll: done")
        finally:
            for db in created:
                drop_pg_database(args.postgres, db)


if __name__ == "__main__":
    main()
