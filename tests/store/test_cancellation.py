"""A task cancelled in the middle of a query ends cancelled, on SQLite and on PostgreSQL.

SQLAlchemy reports a cancellation met inside a query to the engine's error hook as a
disconnect; the hook that turns store outages into 503s (``store/outage.py``) once turned it
into ``ServiceUnavailable``. Every background loop retries on that, so a loop cancelled at
shutdown while it waited for the store ran on, and ``ridecast serve`` never exited.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine
from tests.waiting import eventually_async

# Long enough to be running when it is cancelled, short enough that SQLite's thread (which
# cannot be interrupted) finishes it soon after.
SQLITE_LONG_QUERY = ("WITH RECURSIVE c(x) AS (SELECT started() UNION ALL "
                     "SELECT x + 1 FROM c WHERE x < 5000000) SELECT count(*) FROM c")


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[tuple[AsyncEngine, threading.Event]]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'cancel.db'}")
    started = threading.Event()

    @event.listens_for(engine.sync_engine, "connect")
    def _started_function(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.run_async(lambda raw: raw.create_function(
            "started", 0, lambda: started.set() or 1))

    yield engine, started
    await engine.dispose()


async def _cancel_and_expect_cancelled(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_a_query_cancelled_on_sqlite_ends_cancelled(
    sqlite_engine: tuple[AsyncEngine, threading.Event],
) -> None:
    engine, started = sqlite_engine

    async def long_query() -> Any:
        async with engine.connect() as conn:
            return (await conn.execute(text(SQLITE_LONG_QUERY))).scalar()

    task = asyncio.create_task(long_query())

    async def running() -> bool:
        return started.is_set()

    await eventually_async(running, timeout=30, step=0.01, what="the query to start")
    await _cancel_and_expect_cancelled(task)
    async with engine.connect() as conn:  # the engine serves on
        assert (await conn.execute(text("SELECT 1"))).scalar() == 1


async def test_a_query_cancelled_on_postgresql_ends_cancelled(pg_url: str) -> None:
    engine = create_engine(pg_url)
    marker = "ridecast-cancellation-test"
    admin = await asyncpg.connect(pg_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        async def long_query() -> Any:
            async with engine.connect() as conn:
                return (await conn.execute(text(f"SELECT pg_sleep(60) /* {marker} */"))).scalar()

        task = asyncio.create_task(long_query())

        async def running() -> bool:
            return bool(await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                "AND query LIKE $1", f"%{marker} */"))

        await eventually_async(running, timeout=30, step=0.01,
                               what="the query to run on the server")
        await _cancel_and_expect_cancelled(task)
        async with engine.connect() as conn:  # the engine serves on
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await admin.close()
        await engine.dispose()
