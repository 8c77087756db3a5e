"""The async SQLAlchemy engine, tuned per backend, and schema migration at start-up.

Close an engine made here with ``close_engine`` (``driver_connections``), not only
``dispose()``: a connect or a query cancelled mid-way can leave a driver connection outside
the pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, PoolResetState

from ..errors import ServiceUnavailable
from . import outage
from .driver_connections import Connect, DriverConnections, register

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


class BoundedWaitPool(AsyncAdaptedQueuePool):
    """SQLAlchemy's pool, except that a checkout that waited its whole ``timeout`` for a
    connection (every one in use) raises ``ServiceUnavailable``: a 503 with
    ``Retry-After``, not a 500, for a store that is busy rather than broken."""

    def _do_get(self) -> ConnectionPoolEntry:
        try:
            return super()._do_get()
        except PoolTimeout as exc:
            now = time.monotonic()
            if now - _last_pool_warning[0] >= POOL_WARNING_INTERVAL_S:
                _last_pool_warning[0] = now
                log.warning("every connection to the store was in use for %.1f s "
                            "(RIDECAST_DATABASE_POOL_SIZE %d + RIDECAST_DATABASE_POOL_OVERFLOW "
                            "%d); requests that need one answer 503 meanwhile",
                            self._timeout, self.size(), self._max_overflow)
            raise ServiceUnavailable(
                "every connection to the store is in use; retry after Retry-After seconds",
                retry_after=outage.RETRY_AFTER_S,
            ) from exc


POOL_WARNING_INTERVAL_S = 30.0
"""A busy pool is said in the log at most this often."""
_last_pool_warning = [float("-inf")]


def create_engine(url: str, *, outage_log_interval_s: float = 30.0, pool_size: int = 5,
                  pool_overflow: int = 10, pool_timeout_s: float = 10.0,
                  sqlite_synchronous: str = "normal") -> AsyncEngine:
    """An async engine for ``url``; SQLite gets WAL and a busy timeout.

    A store outage (a dead or refused connection, a locked SQLite file) is raised as
    ``ServiceUnavailable`` by every use of the engine, and reported in the log at most every
    ``outage_log_interval_s`` (``store/outage.py``).

    WAL with ``synchronous=NORMAL`` survives a killed process (kill -9) without losing a
    committed transaction; only an OS crash or power loss can lose the last commits.
    ``sqlite_synchronous="full"`` syncs the WAL at every commit, so those are kept too.
    """
    if sqlite_synchronous not in ("normal", "full"):
        raise ValueError(f"sqlite_synchronous must be normal or full, not {sqlite_synchronous}")
    synchronous = sqlite_synchronous.upper()
    kwargs: dict[str, Any] = {"poolclass": BoundedWaitPool, "pool_size": pool_size,
                              "max_overflow": pool_overflow, "pool_timeout": pool_timeout_s}
    if is_sqlite(url):
        # A connection is rolled back on its return to the pool only when it is in a
        # transaction (``_rollback_if_open``), not always: the rollback is a trip to
        # aiosqlite's thread, and a read or a step transaction (``txsteps``, committed on
        # that thread) leaves none open.
        kwargs["connect_args"] = {"timeout": 30}
        kwargs["pool_reset_on_return"] = None
    connections = DriverConnections(_driver_connect(url))
    kwargs.setdefault("connect_args", {})["async_creator_fn"] = connections.connect
    engine = create_async_engine(url, **kwargs)
    register(engine, connections)
    outage.install(engine, log_interval_s=outage_log_interval_s)
    if is_sqlite(url):
        _require_sqlite_json()
        _ensure_sqlite_dir(url)
        event.listen(engine.sync_engine, "reset", _rollback_if_open)

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    return engine


def _driver_connect(url: str) -> Connect:
    """The driver's own connect for ``url``, which SQLAlchemy would otherwise call."""
    if is_sqlite(url):
        import aiosqlite

        return aiosqlite.connect
    import asyncpg  # type: ignore[import-untyped]

    connect: Connect = asyncpg.connect
    return connect


def _rollback_if_open(dbapi_conn: Any, _record: Any, state: PoolResetState) -> None:
    """The pool's reset of an SQLite connection: a rollback when ``sqlite3`` says a
    transaction is open (or when it cannot tell), none otherwise."""
    if state.terminate_only or not state.asyncio_safe:
        return  # being discarded: closing it ends any transaction
    try:
        open_transaction = bool(dbapi_conn._connection._conn.in_transaction)
    except (AttributeError, ValueError):  # not aiosqlite as we know it, or closed
        open_transaction = True
    if open_transaction:
        dbapi_conn.rollback()


def _require_sqlite_json() -> None:
    """Refuse an SQLite library without JSON functions: the webhook outbox passes a batch's
    ids as one JSON array (``json_each``). Built in since SQLite 3.38, and in the JSON1 builds
    that Python's installers and Linux distributions ship before that."""
    import sqlite3

    db = sqlite3.connect(":memory:")
    try:
        db.execute("SELECT value FROM json_each('[1]')").fetchall()
    except sqlite3.OperationalError as exc:
        raise RuntimeError(
            f"this Python's SQLite ({sqlite3.sqlite_version}) has no JSON functions, which "
            "ridecast needs: use SQLite 3.38 or newer (or a build with JSON1), or PostgreSQL "
            f"(RIDECAST_DATABASE_URL): {exc}"
        ) from exc
    finally:
        db.close()


def _ensure_sqlite_dir(url: str) -> None:
    database = make_url(url).database
    if database and database != ":memory:":
        Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)


def _alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


MIGRATION_LOCK_ID = 0x72696465636173  # "ridecas": the advisory lock of schema upgrades


def upgrade_sync(url: str) -> None:
    """Bring the database at ``url`` to the latest schema (blocking).

    On PostgreSQL the upgrade runs under a session advisory lock, so nodes started at the
    same moment on an empty database take turns: the first migrates, the others then find
    the schema current. SQLite's own write lock does the same for one file.
    """
    if is_sqlite(url):
        _require_sqlite_json()
        _ensure_sqlite_dir(url)
        _quiet_upgrade(url)
        return
    from sqlalchemy import text

    # The lock is held on a connection of its own while alembic migrates on another.
    engine = create_async_engine(url)

    async def locked() -> None:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": MIGRATION_LOCK_ID})
            try:
                await asyncio.to_thread(_quiet_upgrade, url)
            finally:
                await conn.execute(text("SELECT pg_advisory_unlock(:id)"),
                                   {"id": MIGRATION_LOCK_ID})

    async def run() -> None:
        try:
            await locked()
        finally:
            await engine.dispose()

    asyncio.run(run())


def _quiet_upgrade(url: str) -> None:
    # Alembic logs a line per plugin when it is first imported and one per step at INFO;
    # none of them tells a user anything (the store in use is printed at start).
    alembic_log = logging.getLogger("alembic")
    level = alembic_log.level
    alembic_log.setLevel(max(level, logging.WARNING))
    try:
        from alembic import command

        command.upgrade(_alembic_config(url), "head")
    finally:
        alembic_log.setLevel(level)
    logging.getLogger(__name__).debug("database schema migrated to the latest revision")


async def upgrade(url: str) -> None:
    """Bring the database at ``url`` to the latest schema."""
    await asyncio.to_thread(upgrade_sync, url)
