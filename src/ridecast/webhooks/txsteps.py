"""A transaction written once as a generator of SQL steps, run in one trip on SQLite.

aiosqlite runs each call on its own thread and hands the result back through the event
loop; SQLAlchemy makes several such calls per statement (cursor, execute, fetch, close). A
webhook claim (record the finished attempts, count what is in flight, read the heads of the
lanes, lease) is a dozen statements: the profile of ``ridecast serve`` under
``bench/webhooks.py`` showed those trips (``aiosqlite.Connection._execute``) at 12% of the
server's GIL time. The event log's group commit solved the same problem with
``store/sqlite_onehop.py``; this module does it for transactions with reads in them.

The transaction's logic is a generator (no I/O): it yields ``Query`` (rows come back as
tuples) and ``Many`` (a statement for many parameter tuples; nothing comes back) and returns
its result. ``run_steps`` drives it on aiosqlite's thread in one call (a plain ``sqlite3``
transaction, committed when the generator returns, rolled back on any error), or, on any
other driver (PostgreSQL), statement by statement on an ``AsyncConnection`` in one
transaction.

SQL conventions of the steps: ``Query`` takes ``:name`` parameters (sqlite3 and SQLAlchemy's
``text`` both bind them) or a SQLAlchemy statement (only where the step runs on PostgreSQL
alone); ``Many`` takes ``?`` placeholders, translated to the driver's style.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Executable

from ..store.driver_sql import in_paramstyle
from ..store.sqlite_onehop import driver_thread

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Query:
    """One statement; its rows (tuples) are sent back into the generator ([] for none)."""

    sql: str | Executable
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Many:
    """One ``?`` statement run for each of ``rows``; None is sent back."""

    sql: str
    rows: Sequence[tuple[Any, ...]]


Steps = Generator[Query | Many, Any, T]


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
                if step.rows:
                    db.executemany(step.sql, step.rows)
                sent = None
            else:
                if not isinstance(step.sql, str):
                    raise TypeError("a SQLAlchemy statement cannot run on the sqlite3 path")
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
                statement = text(step.sql) if isinstance(step.sql, str) else step.sql
                result = await conn.execute(statement, dict(step.params))
                sent = [tuple(row) for row in result] if result.returns_rows else []
    finally:
        steps.close()


class StepRunner:
    """Runs step transactions on ``engine``: in one trip on aiosqlite, else one by one."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._one_trip = engine.dialect.driver == "aiosqlite"
        self._styled: dict[str, str] = {}

    async def run(self, make: Callable[[], Steps[T]]) -> T:
        """Run the transaction ``make()`` and return what its generator returns."""
        if self._one_trip:
            async with self._engine.connect() as conn:
                thread = await driver_thread(conn)
                if thread is not None:
                    call, db = thread
                    return await call(_sqlite_run, db, make())  # type: ignore[no-any-return]
        async with self._engine.begin() as conn:
            return await _async_run(conn, self._engine.dialect, make(), self._styled)


__all__ = ["Many", "Query", "StepRunner", "Steps"]
