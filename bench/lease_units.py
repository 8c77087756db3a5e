"""What a lease of one row per unit would save PostgreSQL, beside the lease of every row that
ridecast writes today (issue 33 item 7: PostgreSQL's CPU per delivery).

Runs against the PostgreSQL of ``--postgres`` (default: 127.0.0.1:5432), on databases it
creates and drops, bounded in rows and rounds::

    python bench/lease_units.py                       # 40,000 deliveries, 5 rounds
    python bench/lease_units.py --deliveries 20000 --rounds 3

Today a delivery's row is written three times: inserted by the group commit, leased by a
claim (``status = 'delivering'``, its claim token and lease), and recorded as a success. The
lease is the write this bench asks about. Two schemes run the same deliveries, each round on
a new database migrated to ridecast's schema, the order of the two alternating by round:

* ``rows``, the reference: ridecast's own statements (``store.outbox.PostgresOutboxSql``'s
  ``take`` and ``successes``, in transactions opened by its ``held``), run through ridecast's
  step runner as a worker runs them.
* ``units``, a prototype written here and nowhere in ``src/``: a claim inserts one row per
  unit into a table of its own (token, URL, simulation, ordered, lease, the unit's delivery
  ids) and leaves the deliveries ``pending``; a success is written where the row is still
  ``pending`` and the unit its token names still has its row, locked ``FOR SHARE`` by the
  statement (a claim that takes an expired unit over deletes that row, so it cannot race a
  late success; a worker records only rows of its own units, so the id is not looked up in
  the unit's list); the unit's row is deleted with its last success.

Before the phases that are measured, the deliveries are read once, as a claim's read of the
heads reads them in both schemes (PostgreSQL sets their hint bits then, not in the lease or
the success).

What the prototype does not do: the claim's reads that would have to leave out the rows of
units in flight, renewals, releases, failures, retries and the delivery log's status. So
its figure is what the lease's write costs, the most a unit lease could save; whatever those
reads would cost is to be taken off it.

Each unit is ``--unit-rows`` deliveries of one simulation (64: an ordered lane's unit) or,
with ``--unordered``, 256 of one URL (a chunk); a claim leases ``--units-per-claim`` units in
one transaction, and successes are written ``--batch`` at a time (about what the dispatcher
writes per batch in ``bench/webhooks.py``). Reported per round: the CPU of every
``postgres`` process on the machine (the server and its backends, as ``bench/webhooks.py``
counts it) and of this process (the driver and the step runner, the server's share in
ridecast), per delivery, for the lease and for the success, with the WAL bytes per
delivery; then, over the rounds, the medians of each scheme's sum, of ``units`` over
``rows`` and of the µs saved.

A bench of statements, not of ``ridecast serve``: its figures bound what the change could
save; only ``bench/webhooks.py`` on a built change would say what a user sees.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from _load import create_pg_database, drop_pg_database
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine, upgrade
from ridecast.store.outbox import PostgresOutboxSql
from ridecast.store.txsteps import Many, Query, StepRunner, Steps
from webhooks import postgres_cpu

LEASE_S = 30.0
URL = "http://127.0.0.1:9/hook"

_ROWS = (
    "INSERT INTO webhook_deliveries (event_id, simulation_id, message_type, url, status, "
    "attempt_count, next_attempt_at, created_at, updated_at, ordered) "
    "SELECT g, (g - 1) / CAST(:unit AS integer) % 8, 'vehicle_use', :url, 'pending', 0, "
    ":now, :now, :now, CAST(:ordered AS boolean) FROM generate_series(1, CAST(:n AS bigint)) "
    "AS g"
)
_UNITS_TABLE = (
    "CREATE TABLE bench_units (token varchar(32) PRIMARY KEY, url text NOT NULL, "
    "simulation_id integer, ordered boolean NOT NULL, lease_until double precision NOT NULL, "
    "ids bigint[] NOT NULL)"
)
_UNIT_LEASE = (
    "INSERT INTO bench_units (token, url, simulation_id, ordered, lease_until, ids) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
# The reference's success statement with the unit's check in place of the row's: the row
# still pending, the unit its token names still there, its row locked by the statement; the
# units whose last row this is are deleted by the same statement.
_UNIT_SUCCESS = (
    "WITH n AS MATERIALIZED (SELECT token, ids FROM bench_units "
    "WHERE token = ANY(CAST(:unit_tokens AS varchar[])) FOR SHARE), "
    "h AS MATERIALIZED (SELECT u.*, f.status AS held, f.success_started_at AS was_started, "
    "f.success_latency_ms AS was_latency, f.success_status_code AS was_code, "
    "f.success_response_body AS was_body FROM unnest(CAST(:ids AS bigint[]), "
    "CAST(:tokens AS varchar[]), CAST(:started AS double precision[]), "
    "CAST(:latency AS double precision[]), CAST(:code AS integer[]), CAST(:body AS text[])) "
    "AS u(id, token, started, latency, code, body) "
    "JOIN n ON n.token = u.token "
    "CROSS JOIN LATERAL (SELECT status, success_started_at, success_latency_ms, "
    "success_status_code, success_response_body FROM webhook_deliveries AS f "
    "WHERE f.id = u.id LIMIT 1) AS f WHERE f.status = 'pending'), "
    "gone AS (DELETE FROM bench_units WHERE token = ANY(CAST(:ended AS varchar[]))), "
    "kept AS (INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, "
    "status_code, error_class, error, response_body) SELECT id, was_started, was_latency, "
    "was_code, NULL, NULL, was_body FROM h WHERE was_started IS NOT NULL ORDER BY id) "
    "UPDATE webhook_deliveries AS d SET status = 'succeeded', "
    "attempt_count = d.attempt_count + 1, next_attempt_at = :now, last_error = NULL, "
    "updated_at = :now, success_started_at = h.started, success_latency_ms = h.latency, "
    "success_status_code = h.code, success_response_body = h.body FROM h "
    "WHERE d.id = h.id AND d.status = h.held"
)


def _unit_success(rows: Sequence[tuple[Any, ...]], ended: Sequence[str]) -> Steps[None]:
    columns = list(zip(*rows, strict=True))
    yield Query(_UNIT_SUCCESS, {
        "now": rows[0][1], "unit_tokens": sorted(set(columns[7])), "ids": list(columns[6]),
        "tokens": list(columns[7]), "started": list(columns[2]),
        "latency": list(columns[3]), "code": list(columns[4]), "body": list(columns[5]),
        "ended": list(ended)})


def _unit_lease(units: Sequence[tuple[str, Sequence[int]]], ordered: bool,
                lease_until: float) -> Steps[None]:
    yield Many(_UNIT_LEASE, [(token, URL, 0 if ordered else None, ordered, lease_until,
                              list(ids)) for token, ids in units])


def _count(found: Sequence[tuple[Any, ...]]) -> int:
    return int(found[0][0])


class Meter:
    """CPU of PostgreSQL's processes and of this process, and WAL bytes, over a phase."""

    def __init__(self) -> None:
        self.pg_s = 0.0
        self.own_s = 0.0
        self.wal = 0

    async def measure(self, engine: AsyncEngine, phase: Callable[[], Awaitable[None]],
                      ) -> None:
        async with engine.connect() as conn:
            before_wal = _count((await conn.execute(text(
                "SELECT pg_current_wal_insert_lsn() - '0/0'"))).all())
        pg_before, own_before = postgres_cpu(), time.process_time()
        await phase()
        own_after, pg_after = time.process_time(), postgres_cpu()
        async with engine.connect() as conn:
            after_wal = _count((await conn.execute(text(
                "SELECT pg_current_wal_insert_lsn() - '0/0'"))).all())
        self.own_s += own_after - own_before
        self.pg_s += sum(cpu - pg_before.get(pid, 0.0) for pid, cpu in pg_after.items())
        self.wal += after_wal - before_wal


async def run_scheme(scheme: str, url: str, args: argparse.Namespace) -> dict[str, Meter]:
    """One scheme on a new database: its lease and success phases, each metered."""
    await upgrade(url)
    engine = create_engine(url)
    sql = PostgresOutboxSql()
    steps = StepRunner(engine)
    now = time.time()
    ordered = not args.unordered
    unit_rows = 256 if args.unordered else args.unit_rows
    try:
        async with engine.begin() as conn:
            await conn.execute(text(_UNITS_TABLE))
            await conn.execute(text(_ROWS), {"unit": unit_rows, "url": URL, "now": now,
                                             "ordered": ordered, "n": args.deliveries})
        # A claim's read of the heads reads every row before it is leased, in both schemes
        # (and, once the insert has committed, sets the rows' hint bits).
        async with engine.connect() as conn:
            ids = [r[0] for r in (await conn.execute(text(
                "SELECT id FROM webhook_deliveries WHERE status = 'pending' "
                "AND next_attempt_at <= :now ORDER BY id"), {"now": now})).all()]
        units = [(uuid.uuid4().hex, ids[n:n + unit_rows])
                 for n in range(0, len(ids), unit_rows)]
        meters = {"lease": Meter(), "success": Meter()}

        async def lease() -> None:
            for start in range(0, len(units), args.units_per_claim):
                claim = units[start:start + args.units_per_claim]
                at = time.time()
                if scheme == "rows":
                    await steps.run(lambda c=claim, t=at: sql.held(
                        sql.take(t, t + LEASE_S, c)))
                else:
                    await steps.run(lambda c=claim, t=at: sql.held(
                        _unit_lease(c, ordered, t + LEASE_S)))

        async def succeed() -> None:
            results = [(token, i) for token, unit_ids in units for i in unit_ids]
            last = {unit_ids[-1]: token for token, unit_ids in units}
            for start in range(0, len(results), args.batch):
                at = time.time()
                batch = [(at, at, at - 0.002, 1.5, 200, "", i, token, 0)
                         for token, i in results[start:start + args.batch]]
                if scheme == "rows":
                    await steps.run(lambda b=batch: sql.held(sql.successes(b)))
                else:
                    ended = [last[row[6]] for row in batch if row[6] in last]
                    await steps.run(lambda b=batch, e=ended: sql.held(
                        _unit_success(b, e)))

        await meters["lease"].measure(engine, lease)
        await meters["success"].measure(engine, succeed)
        async with engine.connect() as conn:
            done = _count((await conn.execute(text(
                "SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'"))).all())
        if done != len(ids):
            raise SystemExit(f"{scheme}: {done} of {len(ids)} deliveries recorded as "
                             "succeeded; the scheme's statements are wrong")
        return meters
    finally:
        await engine.dispose()


def _us(seconds: float, n: int) -> float:
    return seconds * 1e6 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--unit-rows", type=int, default=64,
                        help="deliveries per unit (an ordered lane's; --unordered: 256)")
    parser.add_argument("--unordered", action="store_true",
                        help="units are chunks of 256 rows of one URL, not lanes")
    parser.add_argument("--units-per-claim", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100, help="successes per write")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    if args.deliveries < 1 or args.rounds < 1 or args.batch < 1 or args.units_per_claim < 1:
        parser.error("--deliveries, --rounds, --batch and --units-per-claim: at least 1")
    n = args.deliveries
    totals: dict[str, list[float]] = {"rows": [], "units": []}
    shape = "unordered chunks of 256" if args.unordered else f"lanes' units of {args.unit_rows}"
    print(f"{n:,} deliveries a round in {shape}, {args.units_per_claim} units a claim, "
          f"successes written {args.batch} at a time; µs per delivery (PostgreSQL's "
          "processes + this process's driver) and WAL bytes per delivery")
    for round_ in range(1, args.rounds + 1):
        order = ["rows", "units"] if round_ % 2 else ["units", "rows"]
        for scheme in order:
            name = f"ridecast_bench_lease_{os.getpid()}_{round_}_{scheme}"
            url = create_pg_database(args.postgres, name)
            if url is None:
                raise SystemExit(1)
            try:
                meters = asyncio.run(run_scheme(scheme, url, args))
            finally:
                drop_pg_database(args.postgres, name)
            parts = []
            total = 0.0
            for phase, m in meters.items():
                pg, own = _us(m.pg_s, n), _us(m.own_s, n)
                total += pg + own
                parts.append(f"{phase} {pg:5.1f} + {own:5.1f}, {m.wal / n:5.0f} B")
            totals[scheme].append(total)
            print(f"round {round_} {scheme:5}  " + "   ".join(parts) + f"   total {total:5.1f}")
    ratios = [u / r for u, r in zip(totals["units"], totals["rows"], strict=True)]
    saved = [r - u for u, r in zip(totals["units"], totals["rows"], strict=True)]
    print(f"lease + success, median µs per delivery: rows {statistics.median(totals['rows']):.1f}"
          f", units {statistics.median(totals['units']):.1f}; units / rows: median "
          f"{statistics.median(ratios):.2f} of {len(ratios)} rounds "
          f"({', '.join(f'{r:.2f}' for r in ratios)}); saved: median "
          f"{statistics.median(saved):.1f} µs per delivery")


if __name__ == "__main__":
    main()
