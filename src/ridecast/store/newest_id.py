"""The newest delivery id of the webhook outbox, read on a connection of the reader's own
(an SQLite file, PostgreSQL through asyncpg) or through the engine's pool: what the outbox
watch (``webhooks/watch.py``) reads. The dialects' drivers stay here, in the store.

Each store is read on a connection of its own, not through the pool: SQLAlchemy's checkout
and aiosqlite's thread cost an idle worker more CPU per read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from .outbox import NEWEST_ID_SQL


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


__all__ = ["PooledNewestId", "PostgresNewestId", "SqliteNewestId", "newest_id_reader"]
