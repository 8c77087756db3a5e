"""The webhook outbox's statements on PostgreSQL read indexes, not the table (issue 33
item 7): every statement a claim, a record, a renewal, a release, a repoint and the delivery
log run is captured as the driver gets it, then explained with its own parameters, against
a table of 1,000,000 finished deliveries with statistics, and of 30,000 and 16,000 without
them; every write named by arrays of ids is explained again with a thousand ids (a join of
the table on such an array was planned as a scan of the whole table below about 30,000 rows,
or at a thousand ids). A claim's read of a URL's unordered rows, and a simulation's of its own, are
checked on SQLite too."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from asyncpg.prepared_stmt import PreparedStatement
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine, upgrade
from ridecast.store.outbox import outbox_sql
from ridecast.store.steps import Query
from ridecast.webhooks.claimer import Claimer
from ridecast.webhooks.deliverylog import DeliveryLog
from ridecast.webhooks.jobs import RELEASE, Result
from ridecast.webhooks.recorder import Recorder

FINISHED = 1_000_000
WAITING = 4_000  # half ordered (lanes of 40 simulations), half unordered (20 URLs)
SIMS = 40
BIG_BATCH = 1_024  # ids in one write: an unordered chunk extended for a busy URL


# The rows: (first event id, last event id, status, attempt count), one simulation per id
# modulo SIMS, one URL per id modulo 20, every other one ordered.
_ROWS = (
    "INSERT INTO webhook_deliveries (event_id, simulation_id, message_type, url, status, "
    "attempt_count, next_attempt_at, created_at, updated_at, ordered, success_started_at) "
    "SELECT g, g % p.sims, 'vehicle_use', 'http://127.0.0.1:9/' || (g % 20), p.status, "
    "p.count, p.at, p.at, p.at, g % 2 = 0, CASE WHEN p.count > 0 THEN p.at END "
    "FROM (SELECT CAST(:sims AS integer) AS sims, CAST(:status AS varchar) AS status, "
    "CAST(:count AS integer) AS count, CAST(:at AS double precision) AS at, "
    "CAST(:first AS bigint) AS first, CAST(:last AS bigint) AS last) AS p, "
    "generate_series(p.first, p.last) AS g"
)


async def _fill(engine: AsyncEngine, finished: int, *, analyze: bool) -> None:
    now = time.time()
    waiting = {"first": finished + 1, "last": finished + WAITING}
    async with engine.begin() as conn:
        await conn.execute(text(_ROWS), {"sims": SIMS, "status": "succeeded", "count": 1,
                                         "at": now - 3600, "first": 1, "last": finished})
        await conn.execute(text(_ROWS), {"sims": SIMS, "status": "pending", "count": 0,
                                         "at": now, **waiting})
        await conn.execute(text(
            "INSERT INTO events (id, simulation_id, message_type, created_at, body) "
            "SELECT g, 0, 'vehicle_use', 0, '{}'::bytea "
            "FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS g"),
            waiting)
        await conn.execute(text("UPDATE event_counter SET last_id = :last"), waiting)
    if not analyze:
        return  # no statistics, as with autovacuum off or before its first run
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("ANALYZE webhook_deliveries"))
        await conn.execute(text("ANALYZE events"))


async def _statements(engine: AsyncEngine, finished: int) -> list[tuple[str, Any]]:
    """Run a worker's statements once each; what was sent (SQL and parameters), as the
    driver got it: the step transactions go to asyncpg itself (``store.pgsteps``), their
    statements prepared ahead (seen by wrapping ``PreparedStatement.fetch``, which asyncpg's
    query logger does not see), the reads through ``fetch`` (seen by the logger)."""
    sent: list[tuple[str, Any]] = []

    def capture(query: Any) -> None:
        if (("webhook_deliveries" in query.query or " FROM events " in query.query)
                and isinstance(query.args, tuple)):
            sent.append((query.query, query.args))

    def listen(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.driver_connection.add_query_logger(capture)

    prepared_fetch = PreparedStatement.fetch

    async def fetch_seen(statement: PreparedStatement, *args: Any, **kwargs: Any) -> Any:
        capture(SimpleNamespace(query=statement.get_query(), args=args))
        return await prepared_fetch(statement, *args, **kwargs)

    await engine.dispose()  # every connection from now on is opened with the listener
    event.listen(engine.sync_engine, "connect", listen)
    PreparedStatement.fetch = fetch_seen  # type: ignore[method-assign]
    try:
        sql = outbox_sql("postgresql")
        recorder = Recorder(engine, sql)
        claimer = Claimer(engine, sql, recorder)
        log = DeliveryLog(engine, sql)
        units = await claimer.claim(max_units=8, unit_rows=64, per_endpoint=4, lease_s=60,
                                    chunk_rows=64)
        assert units, "nothing was claimed"
        first, *rest = units
        token = first.token
        # A running unordered chunk extended under its token: its lease statement names a
        # hundred ids or so (a URL's waiting rows), more than a claim's unit.
        loose = [unit for unit in units if not unit.jobs[0].ordered]
        assert loose, "no unordered chunk was claimed"
        await claimer.claim(max_units=0, unit_rows=64, per_endpoint=4, lease_s=60,
                            chunk_rows=1024, extend=[(loose[0].token, loose[0].jobs[0].url)])
        assert await claimer.keep(token, time.time() + 60)
        await claimer.repoint(first.jobs[0].simulation_id, "http://127.0.0.1:9/moved", token)
        now = time.time()
        results = [Result(job.delivery_id, "succeeded", 1, now, None, None, job.simulation_id,
                          (now, 1.0, 204, None), job.token, job.ordered)
                   for job in first.jobs]
        if rest:
            results += [Result(job.delivery_id, "pending", 1, now + 5, "boom",
                               {"started_at": now, "latency_ms": 1.0, "status_code": 500,
                                "error_class": "http_status", "error": "boom",
                                "response_body": None}, token=job.token,
                               ordered=job.ordered)
                        for job in rest[0].jobs]
        # A claim that records first (the dispatcher's cycle), then the rest released.
        await claimer.claim(max_units=1, unit_rows=64, per_endpoint=4, lease_s=60,
                            chunk_rows=64, record=results)
        await claimer.release([(job.delivery_id, job.token) for unit in rest[1:]
                               for job in unit.jobs])
        await recorder.record([Result(job.delivery_id, RELEASE, 0, now, None, token=job.token)
                               for unit in rest[1:] for job in unit.jobs])
        sim = first.jobs[0].simulation_id
        await log.page(sim, status=None, message_type=None, limit=100, max_chars=1 << 22)
        await log.page(sim, status="succeeded", message_type="vehicle_use", limit=100,
                       before=finished, max_chars=1 << 22)
        # The filters the dashboard polls: each reads only the rows it may return.
        for status in ("pending", "delivering", "failed", "disabled"):
            await log.page(sim, status=status, message_type=None, limit=5, offset=3,
                           max_chars=1 << 22)
        await log.backlog()
        await log.backlog(sim)
        await log.depth()
        await log.retry_failed(sim)
    finally:
        PreparedStatement.fetch = prepared_fetch  # type: ignore[method-assign]
        event.remove(engine.sync_engine, "connect", listen)
        await engine.dispose()
    return sent


async def _plans(url: str, finished: int, *, analyze: bool) -> list[tuple[str, str]]:
    await upgrade(url)
    engine = create_engine(url)
    try:
        await _fill(engine, finished, analyze=analyze)
        sent = await _statements(engine, finished)
        plans = []
        async with engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            for statement, parameters in sent:
                if statement.lstrip().upper().startswith(("SET", "BEGIN")):
                    continue
                found = await driver.fetch(f"EXPLAIN {statement}", *parameters)
                plans.append((statement, "\n".join(row[0] for row in found)))
                if _writes_by_ids(statement) and any(isinstance(p, list) for p in parameters):
                    # The same with a batch as large as a busy URL's (its arrays repeated
                    # to BIG_BATCH): the planner weighs a join against the array's length.
                    found = await driver.fetch(f"EXPLAIN {statement}",
                                               *map(_grown, parameters))
                    plans.append((f"{statement} -- {BIG_BATCH} ids",
                                  "\n".join(row[0] for row in found)))
        return plans
    finally:
        await engine.dispose()


def _grown(parameter: Any) -> Any:
    """An array parameter repeated to ``BIG_BATCH`` items; any other as it is."""
    if not isinstance(parameter, list) or not parameter:
        return parameter
    return (parameter * (BIG_BATCH // len(parameter) + 1))[:BIG_BATCH]


def _writes_by_ids(statement: str) -> bool:
    """A statement that changes rows it names by arrays of ids (a lease, a record)."""
    return "unnest(" in statement and re.search(r"\b(UPDATE|INSERT|DELETE)\b",
                                                statement) is not None


@pytest.mark.parametrize(("finished", "analyze"),
                         [(FINISHED, True), (30_000, False), (16_000, False)],
                         ids=["a-million-analyzed", "30000-no-statistics",
                              "16000-no-statistics"])
def test_no_statement_reads_the_whole_outbox(pg_url: str, finished: int,
                                             analyze: bool) -> None:
    """No plan of a worker's or the delivery log's statements scans ``webhook_deliveries``
    (a sequential scan there costs the whole table on every claim) or ``events`` (a
    claim's read of the bodies it does not hold), and none that writes
    rows named by arrays of ids reads them as a set from a partial index (that read every
    in-flight row's entry, live or dead, on each record): at a million rows with
    the table's statistics, and at 30,000 and 16,000 without them (autovacuum off, or
    before it first ran), where the in-flight count, and the lease of an extended chunk,
    were once planned as a hash join over the whole table. And the delivery log filtered
    by pending, delivering, failed or disabled (the dashboard's polls) reads its partial
    indexes, not the simulation's history."""
    plans = asyncio.run(_plans(pg_url, finished, analyze=analyze))
    assert len(plans) >= 15, [statement for statement, _plan in plans]
    scans = [(statement, plan) for statement, plan in plans
             if "Seq Scan on webhook_deliveries" in plan or "Seq Scan on events" in plan
             or (_writes_by_ids(statement)
                 and "Bitmap Heap Scan on webhook_deliveries" in plan)]
    assert not scans, "\n\n".join(f"{statement}\n{plan}" for statement, plan in scans)
    # The delivery log filtered by a status other than succeeded reads only the rows it may
    # return, from the partial indexes, never the simulation's history by id.
    narrow = [(statement, plan) for statement, plan in plans
              if "d.status IN ('failed', 'disabled')" in statement
              or ") AS a0 UNION ALL" in statement]
    assert len(narrow) >= 8, [statement for statement, _plan in plans]
    wide = [(statement, plan) for statement, plan in narrow if "ix_deliveries_sim" in plan]
    assert not wide, "\n\n".join(f"{statement}\n{plan}" for statement, plan in wide)
    # A simulation's waiting unordered rows are read by simulation, not among every
    # simulation's (another organisation's receiver may have left millions waiting).
    own = [(statement, plan) for statement, plan in plans
           if "status = 'pending' AND NOT ordered AND simulation_id = " in statement]
    assert len(own) >= 4, [statement for statement, _plan in plans]
    shared = [(statement, plan) for statement, plan in own
              if "ix_deliveries_loose_sim" not in plan or "using ix_deliveries_loose on" in plan]
    assert not shared, "\n\n".join(f"{statement}\n{plan}" for statement, plan in shared)
    # A URL's rows are read by due time (a claim's heads, an extension): the index range
    # ends at the rows due now, so rows waiting for a retry are never read.
    url_reads = [(statement, plan) for statement, plan in plans
                 if "NOT ordered AND url = " in statement and "next_attempt_at <= " in statement]
    assert len(url_reads) >= 2, [statement for statement, _plan in plans]
    unbounded = [(statement, plan) for statement, plan in url_reads
                 if not re.search(r"Index Cond: .*next_attempt_at <= ", plan)]
    assert not unbounded, "\n\n".join(f"{statement}\n{plan}" for statement, plan in unbounded)


def test_sqlite_reads_a_urls_due_rows_by_due_time(tmp_path: Path) -> None:
    """On SQLite too, a claim's read of a URL's unordered rows (its head, an extension) is
    a range of ``ix_deliveries_loose`` that ends at the rows due now, in the index's order
    (no sort): however many of the URL's rows wait for a retry, none of them is read; and a
    simulation's rows still to send are read by simulation."""
    path = tmp_path / "plans.db"
    asyncio.run(upgrade(f"sqlite+aiosqlite:///{path}"))
    sql = outbox_sql("sqlite")
    extension = next(sql.free_url_rows("http://127.0.0.1:9/", time.time(), 64))
    assert isinstance(extension, Query)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for statement in (sql.url_head(0, 64), extension.sql):
            plan = " | ".join(row[3] for row in conn.execute(
                f"EXPLAIN QUERY PLAN {statement}", {"u0": "u", "url": "u", "now": 0.0}))
            assert "INDEX ix_deliveries_loose (url=? AND next_attempt_at<?)" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
        # And a simulation's rows still to send (the delivery log, its backlog) by simulation.
        plan = " | ".join(row[3] for row in conn.execute(
            f"EXPLAIN QUERY PLAN {sql.active_rows((0, 1, 2), of_simulation=True)}", {"sim": 1}))
        assert "INDEX ix_deliveries_loose_sim (simulation_id=?)" in plan, plan
        assert "INDEX ix_deliveries_lanes (simulation_id=?)" in plan, plan


def test_sqlite_chooses_a_claims_lanes_and_urls_from_the_indexes(tmp_path: Path) -> None:
    """A claim's choice of the lanes and URLs due first (``heads`` with a key budget) reads
    one entry of ``ix_deliveries_lanes`` or ``ix_deliveries_loose`` per key and each chosen
    head by its primary key, never the table."""
    path = tmp_path / "keys.db"
    asyncio.run(upgrade(f"sqlite+aiosqlite:///{path}"))
    choice = next(outbox_sql("sqlite").heads(time.time(), 64, {}, 64, set(), stale=False,
                                             keys=8))
    assert isinstance(choice, Query)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        plan = " | ".join(row[3] for row in conn.execute(
            f"EXPLAIN QUERY PLAN {choice.sql}", choice.params))
    assert "INDEX ix_deliveries_lanes (simulation_id=?)" in plan, plan
    assert "INDEX ix_deliveries_loose (url=? AND next_attempt_at<?)" in plan, plan
    assert "SEARCH d USING INTEGER PRIMARY KEY" in plan, plan
    assert "SCAN webhook_deliveries" not in plan and "SCAN d" not in plan, plan
