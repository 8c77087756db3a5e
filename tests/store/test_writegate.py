"""The step transactions of one process take turns at SQLite's write lock (``writegate``).

The engine's connections get ``busy_timeout=0`` here: a transaction that reaches SQLite
while another connection holds the write lock then fails at once ("database is locked")
instead of sleeping in the busy handler, so any collision shows. Without the gate, the
concurrent writers below collide (checked by hand with ``write_gate`` returning None).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine
from ridecast.store.txsteps import Many, Query, StepRunner, Steps
from ridecast.store.writegate import write_gate

WRITERS = 12
ROWS = 2000


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'gate.db'}")

    @event.listens_for(engine.sync_engine, "connect")
    def _no_wait(dbapi_conn: Any, _record: Any) -> None:  # after the engine's own pragmas
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=0")
        cur.close()

    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (writer INTEGER, n INTEGER)"))
    yield engine
    await engine.dispose()


def _insert(writer: int) -> Steps[int]:
    yield Many("INSERT INTO t (writer, n) VALUES (?, ?)", [(writer, n) for n in range(ROWS)])
    rows = yield Query("SELECT COUNT(*) FROM t WHERE writer = :w", {"w": writer})
    return int(rows[0][0])


async def test_concurrent_step_transactions_never_meet_in_sqlite(engine: AsyncEngine) -> None:
    """Writers on as many pooled connections, all at once: each commits whole, none is
    refused with "database is locked"."""
    runner = StepRunner(engine)
    counts = await asyncio.gather(*(runner.run(lambda w=w: _insert(w)) for w in range(WRITERS)))
    assert counts == [ROWS] * WRITERS
    async with engine.connect() as conn:
        total = await conn.scalar(text("SELECT COUNT(*) FROM t"))
    assert total == WRITERS * ROWS


async def test_the_gate_is_one_per_engine_and_loop(engine: AsyncEngine, tmp_path: Path) -> None:
    other = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'other.db'}")
    try:
        async with engine.connect() as a, engine.connect() as b, other.connect() as c:
            gate = write_gate(a)
            assert gate is not None
            assert write_gate(b) is gate
            assert write_gate(c) is not gate
    finally:
        await other.dispose()


async def test_postgresql_has_no_gate(pg_url: str) -> None:
    engine = create_engine(pg_url)
    try:
        async with engine.connect() as conn:
            assert write_gate(conn) is None
    finally:
        await engine.dispose()
