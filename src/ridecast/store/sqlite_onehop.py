"""One group commit on SQLite in one trip to the driver's thread.

aiosqlite runs every call on its own thread and hands each result back through the event
loop, so a group commit through SQLAlchemy (the counter's UPDATE, the inserts, the commit,
with their cursors) costs eight trips, each waiting for the loop's next turn: latency that
ingest, the streams and the simulator all pay. ``OneHopWriter`` runs the whole transaction
as one function on that thread instead: the same statements, the same transaction (a
deferred BEGIN, so the counter row's write lock orders concurrent writers exactly as before),
rolled back as a whole on any error.

It reaches aiosqlite's own ``_execute`` and ``_conn`` (stable for years, and pinned in
constraints.txt); if a release renames them, ``for_connection`` returns None and the event
log keeps its SQLAlchemy path.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

Row = tuple[Any, ...]

COUNTER_SQL = "UPDATE event_counter SET last_id = last_id + ? WHERE id = 1 RETURNING last_id"


async def driver_thread(conn: AsyncConnection
                        ) -> tuple[Callable[..., Awaitable[Any]], sqlite3.Connection] | None:
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


class OneHopWriter:
    """Writes one group (counter, event rows, outbox rows) in one call on aiosqlite's thread."""

    def __init__(self, run: Callable[..., Awaitable[Any]], db: sqlite3.Connection,
                 events_sql: str, outbox_sql: str) -> None:
        self._run = run
        self._db = db
        self._events_sql = events_sql
        self._outbox_sql = outbox_sql

    @classmethod
    async def for_connection(cls, conn: AsyncConnection, events_sql: str,
                             outbox_sql: str) -> OneHopWriter | None:
        """The writer for ``conn`` (an aiosqlite connection), or None when it is not one."""
        thread = await driver_thread(conn)
        if thread is None:
            return None
        return cls(thread[0], thread[1], events_sql, outbox_sql)

    async def write(self, count: int, rows: Callable[[int], tuple[Sequence[Row], Sequence[Row]]]
                    ) -> int:
        """Take ``count`` ids from the counter, insert ``rows(first_id)`` (event rows, outbox
        rows) and commit; the last id taken."""
        return int(await self._run(self._transaction, count, rows))

    def _transaction(self, count: int,
                     rows: Callable[[int], tuple[Sequence[Row], Sequence[Row]]]) -> int:
        db = self._db
        try:
            cursor = db.execute(COUNTER_SQL, (count,))
            found = cursor.fetchone()
            cursor.close()
            if found is None:
                raise RuntimeError("the event_counter row is missing (run the migrations)")
            last = int(found[0])
            event_rows, outbox_rows = rows(last - count + 1)
            db.executemany(self._events_sql, event_rows)
            if outbox_rows:
                db.executemany(self._outbox_sql, outbox_rows)
            db.commit()
        except BaseException:
            db.rollback()
            raise
        return last
