"""The delivery log's reads against a long run's history, beside a plain log's in the same run.

Runs on 127.0.0.1 only (SQLite in a temporary directory; PostgreSQL on a fresh database,
dropped afterwards, unless ``--postgres ''``)::

    python bench/delivery_log.py                   # one simulation with 1,000,000 deliveries
    python bench/delivery_log.py --rows 100000 --polls 5

One simulation holds ``--rows`` deliveries: the newest 500 pending, the rest finished, one
in a thousand of them failed. The dashboard's webhook panel asks the log for five pages
every few seconds: the latest 20, one pending, one failed, one succeeded, and the oldest
pending ones (by offset); each answer carries its total. Timed, per poll:

- ridecast: the five pages through ``webhooks.deliverylog.DeliveryLog.page``, as the API
  reads them (each count and filtered page read from an index of the rows it may return;
  succeeded or all deliveries counted among the simulation's newest 10,000).
- reference: the same ``DeliveryLog`` and the same five pages (attempts and byte budget
  alike), with the outbox's reads written as a plain log writes them (``PlainLogSql``):
  rows by ``WHERE simulation_id AND status ORDER BY id DESC LIMIT OFFSET`` and an exact
  ``count(*)`` of the same filter, on the same engine and the same rows. This is how
  ridecast read them before (f2c0c53).

Printed per store: the median and the slowest poll of each, their ratio, and the totals
each showed. The figures belong in docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine, upgrade
from ridecast.store.outbox import ENDED_WHERE, OutboxSql, outbox_sql
from ridecast.store.txsteps import Query, Steps
from ridecast.webhooks.deliverylog import DeliveryLog

PENDING = 500
_FILL = ("INSERT INTO webhook_deliveries (event_id, simulation_id, message_type, url, status, "
         "attempt_count, next_attempt_at, created_at, updated_at, ordered) "
         "SELECT g, 1, 'vehicle_use', 'http://127.0.0.1:9/', CASE WHEN g > :n - :pending "
         "THEN 'pending' WHEN g % 1000 = 0 THEN 'failed' ELSE 'succeeded' END, 1, 0, 0, 0, "
         "{true} FROM {series}")
_SERIES = {
    "postgresql": "generate_series(1, CAST(:n AS bigint)) AS g",
    "sqlite": "(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n) "
              "SELECT g FROM s)",
}
# The dashboard's five reads (main.js): (status, limit, offset from the end of the pending
# rows or None).
POLL: list[tuple[str | None, int, bool]] = [
    (None, 20, False), ("pending", 1, False), ("failed", 1, False), ("succeeded", 1, False),
    ("pending", 5, True)]


async def _fill(engine: AsyncEngine, rows: int) -> None:
    dialect = engine.dialect.name
    async with engine.begin() as conn:
        await conn.execute(text(_FILL.format(
            true="true" if dialect == "postgresql" else "1", series=_SERIES[dialect])),
            {"n": rows, "pending": PENDING})
    if dialect == "postgresql":
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("VACUUM ANALYZE webhook_deliveries"))


def plain_log_sql(dialect: str) -> OutboxSql:
    """The outbox's statements of ``dialect`` with the delivery log's reads as a plain log
    writes them (the reference): every filter read from the simulation's rows by id, and
    every total an exact count."""
    base = type(outbox_sql(dialect))

    class PlainLogSql(base):  # type: ignore[valid-type, misc]
        def _log_rows(self, status: str | None) -> str:
            return "webhook_deliveries AS d"

        def _filters(self, *args: Any) -> tuple[list[str], dict[str, Any]]:
            conds, params = super()._filters(*args)
            return [c for c in conds if ENDED_WHERE not in c], params

        def count(self, simulation_id: int, *, status: str | None,
                  message_type: str | None, limit: int) -> Steps[tuple[int, bool]]:
            conds, params = self._filters(simulation_id, status, message_type, None)
            found = yield Query(f"SELECT count(*) FROM webhook_deliveries AS d "
                                f"WHERE {' AND '.join(conds)}", params)
            return int(found[0][0]), True

    return PlainLogSql()  # type: ignore[no-any-return]


async def _poll(log: DeliveryLog) -> list[int]:
    totals: list[int] = []
    pending = 0
    for status, limit, from_end in POLL:
        page = await log.page(1, status=status, message_type=None, limit=limit,
                              offset=max(0, pending - limit) if from_end else 0,
                              max_chars=1 << 22)
        totals.append(page.total)
        if status == "pending":
            pending = page.total
    return totals


async def _store(url: str, rows: int, polls: int) -> None:
    await upgrade(url)
    engine = create_engine(url)
    try:
        started = time.perf_counter()
        await _fill(engine, rows)
        print(f"  {rows:,} deliveries stored in {time.perf_counter() - started:.1f} s")
        logs = {"ridecast": DeliveryLog(engine, outbox_sql(engine.dialect.name)),
                "plain": DeliveryLog(engine, plain_log_sql(engine.dialect.name))}
        times: dict[str, list[float]] = {"ridecast": [], "plain": []}
        shown: dict[str, list[int]] = {}
        for _ in range(polls):  # alternated, so that drift weighs on both alike
            for name, log in logs.items():
                begun = time.perf_counter()
                shown[name] = await _poll(log)
                times[name].append(time.perf_counter() - begun)
        for name, runs in times.items():
            print(f"  {name:9s} poll of 5 pages: median {statistics.median(runs) * 1e3:8.1f} ms,"
                  f" slowest {max(runs) * 1e3:8.1f} ms; totals shown (latest, pending, "
                  f"failed, succeeded): {shown[name][:4]}")
        ratio = statistics.median(times["plain"]) / statistics.median(times["ridecast"])
        print(f"  delivery log, dashboard poll: plain / ridecast = {ratio:.1f}x (medians)")
    finally:
        await engine.dispose()


async def _postgres_admin(admin_url: str, sql: str) -> None:
    import asyncpg  # only with the postgres extra

    conn = await asyncpg.connect(admin_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--polls", type=int, default=7)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="an administrative URL where a database may be created "
                             "(empty: SQLite only)")
    args = parser.parse_args()
    if args.rows <= PENDING:
        parser.error(f"--rows must be more than {PENDING}")
    with tempfile.TemporaryDirectory() as tmp:
        print("SQLite:")
        await _store(f"sqlite+aiosqlite:///{Path(tmp) / 'log.db'}", args.rows, args.polls)
    if args.postgres:
        name = f"ridecast_bench_log_{uuid.uuid4().hex[:8]}"
        base = args.postgres.rsplit("/", 1)[0].replace("postgresql://",
                                                       "postgresql+asyncpg://")
        await _postgres_admin(args.postgres, f'CREATE DATABASE "{name}"')
        try:
            print("PostgreSQL:")
            await _store(f"{base}/{name}", args.rows, args.polls)
        finally:
            await _postgres_admin(args.postgres, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
