"""SQLite connections go back to the pool rolled back only when a transaction is open.

A step transaction (``txsteps``) commits on aiosqlite's thread, behind SQLAlchemy's back; the
pool's reset then rolled back every such connection on its return: a trip to that thread
for nothing (sqlite3 itself skips a ``ROLLBACK`` with no transaction open, so only the trips
tell). The tests count those trips.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine
from ridecast.store.txsteps import Query, StepRunner, Steps, driver_thread


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (x INTEGER)"))
    yield engine
    await engine.dispose()


@pytest.fixture
def rollbacks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per ``aiosqlite.Connection.rollback`` call (a trip to its thread)."""
    calls: list[int] = []
    real = aiosqlite.Connection.rollback

    async def counted(self: aiosqlite.Connection) -> None:
        calls.append(1)
        await real(self)

    monkeypatch.setattr(aiosqlite.Connection, "rollback", counted)
    return calls


async def count(engine: AsyncEngine) -> int:
    async with engine.begin() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM t"))).scalar_one())


def insert_one() -> Steps[None]:
    yield Query("INSERT INTO t VALUES (:x)", {"x": 1})


async def test_a_step_transaction_goes_back_without_a_rollback(
    engine: AsyncEngine, rollbacks: list[int]
) -> None:
    await StepRunner(engine).run(insert_one)
    assert rollbacks == []
    assert await count(engine) == 1


async def test_a_connection_left_in_a_transaction_is_rolled_back_and_its_lock_released(
    engine: AsyncEngine, tmp_path: Path, rollbacks: list[int]
) -> None:
    async with engine.connect() as conn:
        thread = await driver_thread(conn)
        assert thread is not None
        call, db = thread
        await call(db.execute, "BEGIN IMMEDIATE")
        await call(db.execute, "INSERT INTO t VALUES (2)")  # never committed
    assert len(rollbacks) == 1
    assert await count(engine) == 0
    other = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}")
    try:
        async with other.begin() as conn:  # would wait out busy_timeout behind a held lock
            await conn.execute(text("INSERT INTO t VALUES (3)"))
    finally:
        await other.dispose()
    assert await count(engine) == 1
