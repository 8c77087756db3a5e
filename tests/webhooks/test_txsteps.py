"""Step transactions (store/txsteps.py) on a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine, upgrade
from ridecast.store.txsteps import Many, Query, StepRunner, Steps


@pytest.fixture
async def engine(store_url: str) -> AsyncIterator[AsyncEngine]:
    await upgrade(store_url)
    eng = create_engine(store_url)
    yield eng
    await eng.dispose()


_INSERT = ("INSERT INTO webhook_endpoints (simulation_id, url, failing_since, last_failure_at) "
           "VALUES (?, ?, 1.0, 2.0)")


def _write_then_read(sims: list[int]) -> Steps[list[int]]:
    yield Many(_INSERT, [(sim, f"http://h{sim}/") for sim in sims])
    rows = yield Query("SELECT simulation_id FROM webhook_endpoints WHERE simulation_id >= :low "
                       "ORDER BY simulation_id", {"low": 0})
    return [r[0] for r in rows]


def _write_then_fail() -> Steps[None]:
    yield Many(_INSERT, [(99, "http://x/")])
    raise RuntimeError("half way")


async def test_steps_read_their_writes_and_commit(engine: AsyncEngine) -> None:
    """A transaction's reads see its own writes; what it returns comes back; it commits."""
    runner = StepRunner(engine)
    assert await runner.run(lambda: _write_then_read([3, 1, 2])) == [1, 2, 3]
    assert await runner.run(lambda: _write_then_read([4])) == [1, 2, 3, 4]


async def test_an_error_rolls_the_whole_transaction_back(engine: AsyncEngine) -> None:
    """A step transaction that raises leaves nothing behind, and the runner stays usable."""
    runner = StepRunner(engine)
    with pytest.raises(RuntimeError, match="half way"):
        await runner.run(_write_then_fail)
    assert await runner.run(lambda: _write_then_read([5])) == [5]


async def test_sqlite_runs_the_transaction_in_one_trip(tmp_path: Path) -> None:
    """On aiosqlite the steps run as plain sqlite3 calls on the driver's thread, where a
    SQLAlchemy statement cannot run (PostgreSQL-only steps use those)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'one.db'}"
    await upgrade(url)
    engine = create_engine(url)

    def core_statement() -> Steps[None]:
        yield Query(select(1))

    try:
        with pytest.raises(TypeError, match="sqlite3 path"):
            await StepRunner(engine).run(core_statement)
    finally:
        await engine.dispose()
