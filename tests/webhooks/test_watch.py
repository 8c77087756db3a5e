"""The outbox watch, on SQLite and on PostgreSQL: a row another engine commits wakes it."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import delete, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine, upgrade
from ridecast.store.newest_id import (
    PooledNewestId,
    PostgresNewestId,
    SqliteNewestId,
    newest_id_reader,
)
from ridecast.store.tables import webhook_deliveries
from ridecast.webhooks.watch import OutboxWatch, retry_wait
from tests.waiting import eventually_async


@pytest.fixture
async def engines(store_url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine]]:
    """Two engines on one migrated store: the watching worker's, and the writer's."""
    await upgrade(store_url)
    watcher, writer = create_engine(store_url), create_engine(store_url)
    yield watcher, writer
    await watcher.dispose()
    await writer.dispose()


async def _add_delivery(engine: AsyncEngine) -> int:
    now = time.time()
    async with engine.begin() as conn:
        result = await conn.execute(insert(webhook_deliveries).values(
            event_id=1, simulation_id=1, message_type="bookings", url="http://a/",
            status="pending", attempt_count=0, next_attempt_at=now, created_at=now,
            updated_at=now, ordered=True))
    return int(result.inserted_primary_key[0])


async def test_a_new_row_of_another_engine_wakes_the_watch_once(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    watcher, writer = engines
    await _add_delivery(writer)  # there before the watch: the dispatcher's first poll's
    woken: list[int] = []
    reader = newest_id_reader(watcher)  # its own connection, not the pool
    assert isinstance(reader, SqliteNewestId | PostgresNewestId)
    watch = OutboxWatch(reader, lambda: woken.append(1), interval_s=0.01)
    try:
        assert await watch.check() is False  # the first read only sets the mark
        assert await watch.check() is False  # nothing new
        newest = await _add_delivery(writer)
        assert await reader() == await PooledNewestId(watcher)() == newest  # the pool agrees
        assert await watch.check() is True
        assert await watch.check() is False  # the same row does not wake it twice
        assert woken == [1]
    finally:
        await watch.close()


async def test_the_running_watch_wakes_on_each_commit_and_sees_a_new_row_after_a_purge(
    engines: tuple[AsyncEngine, AsyncEngine],
) -> None:
    watcher, writer = engines
    woken = asyncio.Event()
    reader = newest_id_reader(watcher)
    reads = 0

    async def counted() -> int:
        nonlocal reads
        newest = await reader()
        reads += 1
        return newest

    if hasattr(reader, "aclose"):  # the watch closes its reader's own connection
        counted.aclose = reader.aclose  # type: ignore[attr-defined]
    watch = OutboxWatch(counted, woken.set, interval_s=0.005)
    task = asyncio.create_task(watch.run())
    try:
        await eventually_async(lambda: reads >= 1, what="the first read setting the mark")
        assert not woken.is_set()
        newest = await _add_delivery(writer)
        await asyncio.wait_for(woken.wait(), timeout=10)
        # Retention removes every finished row, the newest included, and SQLite gives
        # their ids out again: the watch wakes on the emptied table, then on the new row.
        async with writer.begin() as conn:
            await conn.execute(delete(webhook_deliveries))
        # A read begun after the purge (the one in flight may predate it) has seen it.
        purged_at = reads
        await eventually_async(lambda: reads >= purged_at + 2, what="a read after the purge")
        woken.clear()
        again = await _add_delivery(writer)
        if writer.dialect.name == "sqlite":
            assert again == newest  # the purged row's id, given out again
        await asyncio.wait_for(woken.wait(), timeout=10)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await watch.close()


async def test_a_failing_read_is_retried_and_the_watch_keeps_running() -> None:
    reads = 0

    async def newest_id() -> int:
        nonlocal reads
        reads += 1
        if reads <= 3:
            raise OSError("store unreachable")
        return reads

    woken = asyncio.Event()
    task = asyncio.create_task(OutboxWatch(newest_id, woken.set, interval_s=0.001).run())
    try:
        await asyncio.wait_for(woken.wait(), timeout=10)  # read 4 sets the mark, 5 changed
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert reads >= 5


def test_after_failed_reads_the_watch_waits_twice_as_long_each_time_up_to_the_poll() -> None:
    waits = [0.01]
    for _ in range(9):
        waits.append(retry_wait(waits[-1]))
    assert waits == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0, 1.0]
    assert retry_wait(0.3, cap_s=0.5) == 0.5


def test_the_interval_must_be_positive() -> None:
    async def newest_id() -> int:
        return 0

    with pytest.raises(ValueError, match="positive"):
        OutboxWatch(newest_id, lambda: None, interval_s=0)


async def test_the_postgres_reader_opens_a_new_connection_after_losing_one(pg_url: str) -> None:
    await upgrade(pg_url)
    writer = create_engine(pg_url)
    reader = newest_id_reader(writer)
    assert isinstance(reader, PostgresNewestId)
    try:
        assert await reader() == 0
        others = ("FROM pg_stat_activity "
                  "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        async with writer.connect() as conn:  # the server drops every other session
            await conn.execute(text(f"SELECT pg_terminate_backend(pid) {others}"))

            async def gone() -> bool:
                left = await conn.scalar(text(f"SELECT count(*) {others}"))
                await conn.commit()  # the statistics are a snapshot per transaction
                return not left

            # They are gone before the reader reads again.
            await eventually_async(gone, timeout=10, step=0.01,
                                   what="the terminated sessions ended")
        # asyncpg's answer to a terminated session varies (a PostgresError, an
        # InterfaceError or an InternalClientError): what matters is the next read.
        with pytest.raises(Exception):  # noqa: B017
            await reader()
        newest = await _add_delivery(writer)
        assert await reader() == newest  # a new connection
    finally:
        await reader.aclose()
        await writer.dispose()


async def test_the_postgres_reader_connects_as_the_engine_does(pg_url: str) -> None:
    """A URL option of SQLAlchemy's asyncpg dialect, which asyncpg itself would send to the
    server as an unknown setting, reaches neither: the reader connects as the pool does."""
    url = f"{pg_url}?prepared_statement_cache_size=50"
    await upgrade(url)
    engine = create_engine(url)
    reader = newest_id_reader(engine)
    assert isinstance(reader, PostgresNewestId)
    try:
        newest = await _add_delivery(engine)
        assert await reader() == newest
    finally:
        await reader.aclose()
        await engine.dispose()


async def test_the_sqlite_reader_answers_its_last_id_while_the_file_is_locked(
    tmp_path: Path,
) -> None:
    """A file another connection holds exclusively (rollback journal: no WAL) cannot be
    read: the reader does not wait on the event loop's thread, it answers the last id."""
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE webhook_deliveries (id INTEGER PRIMARY KEY)")
    holder.execute("INSERT INTO webhook_deliveries (id) VALUES (7)")
    reader = SqliteNewestId(str(path))
    try:
        assert await reader() == 7
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("INSERT INTO webhook_deliveries (id) VALUES (8)")
        assert await reader() == 7  # locked: the last id, at once
        holder.execute("COMMIT")
        assert await reader() == 8
    finally:
        await reader.aclose()
        holder.close()
