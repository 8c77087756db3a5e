"""The outbox watch: wakes a dispatcher that no bus tells of new deliveries.

A ``ridecast worker`` on the in-process bus (the embedded default: no ``RIDECAST_BUS_URL``)
hears nothing of the rows ``ridecast serve`` commits. Without this watch it found them by
its poll, once a second, so each delivery waited up to a second after its event was
committed. The watch reads the outbox's newest delivery id every ``interval_s`` (one read
of the primary key's last entry: no write, no lock a writer waits for, in SQLite's WAL mode
or on PostgreSQL) and calls ``on_new`` when it has changed.

Changed, not grown: SQLite gives the ids of purged rows at the top of the table out again.
A change the watch misses (the newest row purged and its id given to a new row between two
reads) leaves that row to the poll, as rows that come due later (retries, leases running
out) are.

Each store is read on a connection of the watch's own, not through the pool: SQLAlchemy's
checkout and aiosqlite's thread cost an idle worker several times more CPU per read
(docs/performance.md, "The outbox watch").
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ..store.outbox import NEWEST_ID_SQL

log = logging.getLogger(__name__)

# At most one warning per this many seconds while the store cannot be read.
WARN_EVERY_S = 60.0
# After failed reads, the watch waits twice as long each time, up to this (the poll's period).
MAX_RETRY_S = 1.0


class SqliteNewestId:
    """The newest delivery id of an SQLite file, read on a connection of its own that
    only reads (``query_only``), on the calling thread. In WAL mode a read takes no lock a
    writer holds; should the file be locked all the same (a WAL reset, a rollback-journal
    file), the read gives up at once and answers the last id it read."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None
        self._last = 0

    async def __call__(self) -> int:
        if self._db is None:
            self._db = sqlite3.connect(self._path, timeout=0, isolation_level=None)
            self._db.execute("PRAGMA query_only = 1")
        try:
            row = self._db.execute(NEWEST_ID_SQL).fetchone()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorname not in ("SQLITE_BUSY", "SQLITE_LOCKED"):
                raise
            return self._last
        self._last = int(row[0] or 0)
        return self._last

    async def aclose(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class PostgresNewestId:
    """The newest delivery id on PostgreSQL, read on an asyncpg connection of its own (its
    statement prepared once). A broken connection is dropped; the next read opens another."""

    def __init__(self, connect_kwargs: dict[str, Any]) -> None:
        self._connect_kwargs = connect_kwargs
        self._conn: Any = None

    async def __call__(self) -> int:
        import asyncpg  # type: ignore[import-untyped]  # the postgres extra; no stubs

        if self._conn is None:
            self._conn = await asyncpg.connect(**self._connect_kwargs, timeout=5)
        try:
            newest = await self._conn.fetchval(NEWEST_ID_SQL, timeout=5)
        except BaseException:
            await self.aclose()
            raise
        return int(newest or 0)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()


class PooledNewestId:
    """The newest delivery id read through ``engine``'s pool (any other store)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def __call__(self) -> int:
        async with self._engine.connect() as conn:
            newest = await conn.scalar(text(NEWEST_ID_SQL))
        return int(newest or 0)


def newest_id_reader(engine: AsyncEngine) -> Callable[[], Awaitable[int]]:
    """How the watch reads the newest delivery id of ``engine``'s store: on a connection
    of its own (an SQLite file; PostgreSQL through asyncpg), else through the pool."""
    url = engine.url
    backend = url.get_backend_name()
    if backend == "sqlite" and url.database not in (None, "", ":memory:"):
        return SqliteNewestId(str(url.database))
    if backend == "postgresql" and url.get_driver_name() == "asyncpg":
        # What the engine's own connections get: SQLAlchemy's dialect turns the URL (and
        # its query options) into asyncpg's arguments, less the options its adapter keeps.
        _args, kwargs = engine.dialect.create_connect_args(url)
        for adapter_only in ("prepared_statement_cache_size", "prepared_statement_name_func",
                             "async_creator_fn"):
            kwargs.pop(adapter_only, None)
        return PostgresNewestId(dict(kwargs))
    return PooledNewestId(engine)


def retry_wait(previous_s: float, *, cap_s: float | None = None) -> float:
    """The wait before the next read after a failed one: twice the previous wait, up to
    ``cap_s`` (``MAX_RETRY_S``)."""
    return min(MAX_RETRY_S if cap_s is None else cap_s, previous_s * 2)


class OutboxWatch:
    """Calls ``on_new`` once per ``interval_s`` in which the newest delivery id changed."""

    def __init__(self, newest_id: Callable[[], Awaitable[int]],
                 on_new: Callable[[], None] | None = None, *, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("the watch interval must be positive")
        self._newest_id = newest_id
        self._on_new = on_new
        self._interval_s = interval_s
        self._seen: int | None = None
        self._warned_at = float("-inf")

    async def check(self) -> bool:
        """Read the newest id once; True (and ``on_new`` called) when it changed since the
        last read. The first read only sets the mark: the poll that starts every
        dispatcher claims what was there before."""
        newest = await self._newest_id()
        changed = self._seen is not None and newest != self._seen
        self._seen = newest
        if changed and self._on_new is not None:
            self._on_new()
        return changed

    async def run(self, on_new: Callable[[], None] | None = None) -> None:
        """``check`` every ``interval_s`` until cancelled. A failed read (the store
        unreachable, or refusing the watch's own connection) is retried after twice the
        wait of the one before, up to ``MAX_RETRY_S``, so that a store that is down is not
        asked 100 times a second; the poll still finds the rows meanwhile. It warns at most
        once a minute. ``on_new``: whom to call from now on (the dispatcher's ``wake``)."""
        if on_new is not None:
            self._on_new = on_new
        wait = self._interval_s
        while True:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                wait = retry_wait(wait)
                now = time.monotonic()
                if now - self._warned_at >= WARN_EVERY_S:
                    self._warned_at = now
                    log.warning("reading the outbox's newest delivery failed; retrying in "
                                "up to %.0f s", MAX_RETRY_S, exc_info=True)
            else:
                wait = self._interval_s
            await asyncio.sleep(wait)

    async def close(self) -> None:
        """Close the reader's own connection, if it has one (the pool's reader has none)."""
        aclose = getattr(self._newest_id, "aclose", None)
        if aclose is not None:
            await aclose()
