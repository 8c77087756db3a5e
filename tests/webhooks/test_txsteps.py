"""Step transactions (store/txsteps.py) on a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from asyncpg.connection import Connection
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.errors import ServiceUnavailable
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.pgsteps import MANY_CHUNK_BYTES, bursts, dollared, numbered
from ridecast.store.txsteps import Many, Query, StepRunner, Steps


@pytest.fixture
async def engine(store_url: str) -> AsyncIterator[AsyncEngine]:
    await upgrade(store_url)
    eng = create_engine(store_url)
    yield eng
    await eng.dispose()


_INSERT = ("INSERT INTO webhook_endpoints (simulation_id, url, failing_since, last_failure_at) "
           "VALUES (?, ?, 1.0, 2.0)")


_READ = ("SELECT simulation_id FROM webhook_endpoints WHERE simulation_id >= :low "
         "ORDER BY simulation_id")


def _write_then_read(sims: list[int]) -> Steps[list[int]]:
    yield Many(_INSERT, [(sim, f"http://h{sim}/") for sim in sims])
    rows = yield Query(_READ, {"low": 0})
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


async def test_postgres_a_transaction_prepares_its_statements_before_it_begins(
        pg_url: str) -> None:
    """On a fresh connection, the statements this process's transactions ran are prepared
    before the transaction's BEGIN: asyncpg prepares with Parse, Describe and Flush and then
    waits, and a worker stopped in that wait inside a transaction keeps its locks with no
    timeout of the server's to end it (``store.pgsteps``). Every prepare is watched on the
    real connection (the wrapped call runs as it would)."""
    await upgrade(pg_url)
    engine = create_engine(pg_url, pool_size=1, pool_overflow=0)
    runner = StepRunner(engine)
    prepare = Connection.prepare
    seen: list[tuple[str, bool]] = []

    async def watched(conn: Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((query, conn.is_in_transaction()))
        return await prepare(conn, query, *args, **kwargs)

    try:
        assert await runner.run(lambda: _write_then_read([11])) == [11]
        await engine.dispose()  # the next transaction gets a new connection
        Connection.prepare = watched  # type: ignore[method-assign]
        assert await runner.run(lambda: _write_then_read([12])) == [11, 12]
        assert await runner.run(lambda: _write_then_read([13])) == [11, 12, 13]
    finally:
        Connection.prepare = prepare  # type: ignore[method-assign]
        await engine.dispose()
    # The two statements (and any other this process's transactions ran), each once on the
    # new connection, and none inside a transaction.
    queries = [query for query, _inside in seen]
    assert {dollared(_INSERT), numbered(_READ)[0]} <= set(queries), seen
    assert len(queries) == len(set(queries)), seen
    assert not any(inside for _query, inside in seen), seen


async def test_postgres_a_large_many_is_written_whole(pg_url: str) -> None:
    """A ``Many`` larger than one burst (``MANY_CHUNK_BYTES``) writes every row, in its
    transaction, and an error after it rolls all of them back."""
    await upgrade(pg_url)
    engine = create_engine(pg_url, pool_size=1, pool_overflow=0)
    runner = StepRunner(engine)
    url = "http://h/" + "x" * 1000
    rows = [(sim, url) for sim in range(100, 100 + 3 * MANY_CHUNK_BYTES // len(url))]

    def write(fail: bool) -> Steps[int]:
        yield Many(_INSERT, rows)
        found = yield Query("SELECT count(*) FROM webhook_endpoints WHERE url = :url",
                            {"url": url})
        if fail:
            raise RuntimeError("after the bursts")
        return int(found[0][0])

    try:
        with pytest.raises(RuntimeError, match="after the bursts"):
            await runner.run(lambda: write(True))
        assert await runner.run(lambda: write(False)) == len(rows)
    finally:
        await engine.dispose()


@given(st.lists(st.lists(st.one_of(st.integers(), st.text(max_size=300),
                                   st.binary(max_size=300)), max_size=4), max_size=40),
       st.integers(min_value=1, max_value=2000))
def test_bursts_keep_every_row_in_order_and_under_the_limit(rows: list[list[Any]],
                                                            limit: int) -> None:
    """``bursts`` splits rows into runs, in order, none empty, each within ``limit``
    estimated bytes unless it is a single row."""
    runs = list(bursts(rows, limit))
    assert [row for run in runs for row in run] == rows
    assert all(run for run in runs)
    assert all(len(run) == 1 or sum(_estimate(row) for row in run) <= limit for run in runs)


def _estimate(row: list[Any]) -> int:
    return sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row) + 4 * len(row)


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
