"""Step transactions (store/txsteps.py) on a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.errors import ServiceUnavailable
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.pgsteps import dollared, numbered
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
    """On aiosqlite the whole generator runs on the driver's thread, as plain sqlite3 calls:
    one trip from the event loop, whatever the number of statements."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'one.db'}"
    await upgrade(url)
    engine = create_engine(url)
    threads: list[int] = []

    def where_it_runs() -> Steps[None]:
        for _ in range(3):
            threads.append(threading.get_ident())
            yield Query("SELECT 1")
        threads.append(threading.get_ident())

    try:
        await StepRunner(engine).run(where_it_runs)
        assert len(threads) == 4
        assert set(threads) != {threading.get_ident()} and len(set(threads)) == 1
    finally:
        await engine.dispose()


def _hold_and_read() -> Steps[tuple[str, str, str]]:
    # The SETs travel with the BEGIN (``pgsteps``): they must still hold in the transaction.
    yield Query("SET LOCAL idle_in_transaction_session_timeout = 1234")
    yield Query("SET LOCAL synchronous_commit = off")
    rows = yield Query("SELECT current_setting('idle_in_transaction_session_timeout'), "
                       "current_setting('synchronous_commit'), "
                       "CAST(:x AS text) || CAST(:x AS text)", {"x": "ab"})
    return rows[0][0], rows[0][1], rows[0][2]


async def test_postgres_a_leading_set_holds_only_in_its_transaction(pg_url: str) -> None:
    """On asyncpg the leading SETs are sent with the BEGIN, one round trip: they hold inside
    the transaction and not after it, and a bind named twice is bound once."""
    await upgrade(pg_url)
    engine = create_engine(pg_url, pool_size=1, pool_overflow=0)
    runner = StepRunner(engine)

    def after() -> Steps[tuple[str, str]]:
        rows = yield Query("SELECT current_setting('idle_in_transaction_session_timeout'), "
                           "current_setting('synchronous_commit')")
        return str(rows[0][0]), str(rows[0][1])

    def only_settings() -> Steps[None]:
        yield Query("SET LOCAL synchronous_commit = off")

    try:
        assert await runner.run(_hold_and_read) == ("1234ms", "off", "abab")
        assert await runner.run(after) == ("0", "on")
        await runner.run(only_settings)  # BEGIN, the SET and COMMIT in one trip
        assert await runner.run(after) == ("0", "on")
    finally:
        await engine.dispose()


async def test_postgres_a_dead_connection_is_an_outage_and_is_replaced(pg_url: str) -> None:
    """A connection the server ends inside a step transaction raises ServiceUnavailable (as
    through the engine), rolls everything back, and the pool gives a fresh one next."""
    await upgrade(pg_url)
    engine = create_engine(pg_url, pool_size=1, pool_overflow=0)
    runner = StepRunner(engine)

    def write_then_die() -> Steps[None]:
        yield Many(_INSERT, [(7, "http://x/")])
        yield Query("SELECT pg_terminate_backend(pg_backend_pid())")
        yield Query("SELECT 1")

    try:
        with pytest.raises(ServiceUnavailable):
            await runner.run(write_then_die)
        assert await runner.run(lambda: _write_then_read([8])) == [8]
    finally:
        await engine.dispose()


@given(st.lists(st.sampled_from(["a", "b", "c1", "x_y"]), min_size=1, max_size=6),
       st.sampled_from(["", " ::text", " ", ")"]))
def test_binds_are_numbered_in_first_use_order(names: list[str], tail: str) -> None:
    """``:name`` binds become ``$n`` in the order of first use, a repeated name keeps its
    number, and a ``::`` cast is never taken for a bind (as in SQLAlchemy's ``text``, a
    bind right before ``::`` is not one)."""
    sql = " + ".join(f":{name}{tail}" for name in names) + " + CAST('1' AS int)::text"
    text, order = numbered(sql)
    assert list(order) == list(dict.fromkeys(names))
    expected = " + ".join(f"${order.index(name) + 1}{tail}" for name in names)
    assert text == expected + " + CAST('1' AS int)::text"
    assert dollared("VALUES (?, ?, '::x', ?)") == "VALUES ($1, $2, '::x', $3)"
