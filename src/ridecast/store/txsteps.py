"""A transaction written once as a generator of SQL steps, run in one trip on SQLite.

aiosqlite runs each call on its own thread and hands the result back through the event
loop; SQLAlchemy makes several such calls per statement (cursor, execute, fetch, close). A
webhook claim (record the finished attempts, count what is in flight, read the heads of the
lanes, lease) is a dozen statements, and the event log's group commit (the counter's
UPDATE, the inserts, the commit) several more: each trip costs the event loop's thread.
Both run their transaction through this module.

The transaction's logic is a generator of steps (``store.steps``). ``run_on`` drives it on
aiosqlite's thread in one call (a plain ``sqlite3`` transaction, committed when the
generator returns, rolled back on any error); on asyncpg (PostgreSQL) on the driver's own
connection (``pgsteps``); on any other driver statement by statement on an
``AsyncConnection`` in one transaction. ``StepRunner`` does the same on a connection of an
engine's pool.

The one-trip path reaches aiosqlite's own ``_execute`` and ``_conn`` (stable for years, and
pinned in constraints.txt); if a release renames them, ``driver_thread`` returns None and
the statements go one by one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from itertools import chain
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .driver_sql import in_paramstyle
from .pgsteps import run_asyncpg
from .steps import Many, Query, Steps
from .writegate import write_gate

T = TypeVar("T")


DriverThread = tuple[Callable[..., Awaitable[Any]], sqlite3.Connection]


async def driver_thread(conn: AsyncConnection) -> DriverThread | None:
    """For an aiosqlite connection: the call that runs a function on its thread, and the
    ``sqlite3`` connection that function may use there; None for any other driver, or when
    aiosqlite's internals are not as expected."""
    if conn.dialect.driver != "aiosqlite":
        return None
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    run = getattr(driver, "_execute", None)
    try:
        db = getattr(driver, "_conn", None)
    except ValueError:  # aiosqlite: "no active connection"
        db = None
    if run is None or not isinstance(db, sqlite3.Connection):
        return None
    return run, db


VALUES_ROWS = 256
"""Rows per statement of a ``Many`` with ``values`` (fewer when SQLite's limit of bound
variables is lower): 256 rows of ten columns bind 2,560 variables."""


@lru_cache(maxsize=256)
def _values_sql(template: str, width: int, count: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return template.replace("{values}", "VALUES " + ", ".join([row] * count))


def _run_values(db: sqlite3.Connection, template: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Run ``rows`` through ``template`` in statements of power-of-two row counts (so a few
    statement texts recur, and sqlite3's statement cache keeps them prepared).

    Why not ``executemany``: sqlite3 steps it row by row, giving the GIL up around each
    row's step and taking it back before the next, while the event loop's thread wants it
    too. The group commit and the webhook claims queue behind each other for SQLite's one
    writer (``writegate``), so every row's wait held them all.
    """
    width = len(rows[0])
    cap = max(1, min(VALUES_ROWS, db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
    cap = 1 << (cap.bit_length() - 1)
    start = 0
    while start < len(rows):
        count = min(cap, 1 << ((len(rows) - start).bit_length() - 1))
        part = rows[start:start + count]
        db.execute(_values_sql(template, width, count),
                   list(chain.from_iterable(part))).close()
        start += count


def _sqlite_run(db: sqlite3.Connection, steps: Steps[T]) -> T:
    """Run ``steps`` as one transaction on ``db`` (on aiosqlite's thread)."""
    try:
        if not db.in_transaction:
            # The write lock at once, as the statements' first write would take it: every
            # step transaction writes, and a claim's reads must see no other claim's writes.
            db.execute("BEGIN IMMEDIATE")
        sent: Any = None
        while True:
            try:
                step = steps.send(sent)
            except StopIteration as stop:
                db.commit()
                return stop.value  # type: ignore[no-any-return]
            if isinstance(step, Many):
                if step.values is not None and len(step.rows) > 1:
                    _run_values(db, step.values, step.rows)
                elif step.rows:
                    db.executemany(step.sql, step.rows)
                sent = None
            else:
                cursor = db.execute(step.sql, step.params)
                try:
                    sent = cursor.fetchall()
                finally:
                    cursor.close()
    except BaseException:
        db.rollback()
        raise
    finally:
        steps.close()


async def _async_run(conn: AsyncConnection, dialect: Dialect, steps: Steps[T],
                     styled: dict[str, str]) -> T:
    sent: Any = None
    try:
        while True:
            try:
                step = steps.send(sent)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if isinstance(step, Many):
                if step.rows:
                    sql = styled.get(step.sql)
                    if sql is None:
                        sql = styled[step.sql] = in_paramstyle(dialect, step.sql)
                    await conn.exec_driver_sql(sql, list(step.rows))
                sent = None
            else:
                result = await conn.execute(text(step.sql), dict(step.params))
                sent = [tuple(row) for row in result] if result.returns_rows else []
    finally:
        steps.close()


async def run_on(conn: AsyncConnection, steps: Steps[T], *, thread: DriverThread | None,
                 styled: dict[str, str]) -> T:
    """Run ``steps`` as one transaction on ``conn``: in one call on ``thread`` (``conn``'s
    ``driver_thread``, which the caller may keep while it keeps ``conn``), else statement by
    statement. ``styled``: the caller's cache of ``Many`` statements in the driver's style."""
    gate = write_gate(conn)  # SQLite: this process's writers take turns (``writegate``)
    if gate is None:
        if conn.dialect.driver == "asyncpg":
            return await run_asyncpg(conn, steps)
        async with conn.begin():
            return await _async_run(conn, conn.dialect, steps, styled)
    async with gate:
        if thread is not None:
            call, db = thread
            return await call(_sqlite_run, db, steps)  # type: ignore[no-any-return]
        async with conn.begin():
            return await _async_run(conn, conn.dialect, steps, styled)


async def run_alone(conn: AsyncConnection, steps: Steps[T]) -> T:
    """Run ``steps``' statements on ``conn`` each on its own, in no transaction of the
    runner's (reads, or one statement on a connection in autocommit)."""
    if conn.dialect.driver == "asyncpg":
        return await run_asyncpg(conn, steps, transaction=False)
    return await _async_run(conn, conn.dialect, steps, {})


class StepRunner:
    """Runs step transactions on ``engine``: in one trip on aiosqlite, else one by one."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._styled: dict[str, str] = {}

    async def run(self, make: Callable[[], Steps[T]]) -> T:
        """Run the transaction ``make()`` and return what its generator returns."""
        async with self._engine.connect() as conn:
            return await run_on(conn, make(), thread=await driver_thread(conn),
                                styled=self._styled)

    async def read(self, make: Callable[[], Steps[T]]) -> T:
        """Run the read-only steps ``make()`` statement by statement on a pooled connection:
        no write lock, no write gate (a read never waits for the group commit)."""
        async with self._engine.connect() as conn:
            return await run_alone(conn, make())


__all__ = ["DriverThread", "Many", "Query", "StepRunner", "Steps", "driver_thread", "run_alone",
           "run_on"]
