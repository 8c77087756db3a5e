"""A task cancelled while the pool opens its connection leaves nothing open once the engine
is closed (``store/driver_connections.py``), on SQLite and on PostgreSQL.

The cancellation is tried after more and more turns of the event loop, from the task's
start until the task ends before it, so it lands before, during and after the driver's
connect and the first-connect pragmas. Each try runs in an event loop of its own that
closes afterwards, as a process's does at exit: an aiosqlite thread left behind fails
there ("Event loop is closed").
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from ridecast.store.driver_connections import close_engine
from ridecast.store.engine import create_engine
from tests.conftest import pg_backends
from tests.waiting import eventually

MAX_TRIES = 200


def _tries(url: Callable[[int], str]) -> list[bool]:
    """Whether each try was cancelled: the turns grow by one, then by a tenth, until the
    query ends before its cancellation. ``url(n)``: the store of the n-th try."""
    cancelled: list[bool] = []
    turns = 0
    while len(cancelled) < MAX_TRIES:
        cancelled.append(asyncio.run(_cancelled_at(url(len(cancelled)), turns)))
        if not cancelled[-1]:
            return cancelled
        turns = max(turns + 1, int(turns * 1.1))
    raise AssertionError(f"the query never ended within {turns} turns of the loop")


def _driver_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}


async def _cancelled_at(url: str, turns: int) -> bool:
    """Start a query on a fresh engine, cancel it after ``turns`` turns of the loop, close
    the engine; True when the cancellation came before the query ended."""
    engine = create_engine(url)

    async def query() -> None:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    task = asyncio.create_task(query())
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await close_engine(engine)
    return task.cancelled()


def test_a_connect_cancelled_on_sqlite_leaves_no_thread(tmp_path: Path) -> None:
    # A file per try: under pytest, a query cancelled on SQLite sometimes leaves the next
    # connection to the same file waiting out its busy timeout (30 s), with or without
    # DriverConnections (not seen when the same loop runs outside pytest).
    def url(n: int) -> str:
        return f"sqlite+aiosqlite:///{tmp_path / f'cancel-{n}.db'}"

    before = _driver_threads()
    errors: list[BaseException | None] = []
    previous_hook = threading.excepthook
    # Only this test's threads: one another test left behind is not this one's to judge.
    existing = set(threading.enumerate())
    threading.excepthook = lambda args: (
        None if args.thread in existing else errors.append(args.exc_value))
    try:
        cancelled = _tries(url)
        eventually(lambda: _driver_threads() <= before, timeout=10,
                   what="every aiosqlite thread ended",
                   why=lambda: _driver_threads() - before)
    finally:
        threading.excepthook = previous_hook
    assert errors == []
    assert cancelled.count(True) > 1  # the tries spanned the query, up to its end


def test_a_connect_cancelled_on_postgresql_leaves_no_backend(pg_url: str) -> None:
    cancelled = _tries(lambda _n: pg_url)
    # Without a close, a connection whose connect was cancelled keeps its backend until the
    # garbage collector finds it; closed, the server lets go of it within moments.
    eventually(lambda: pg_backends(pg_url) == 0, timeout=10,
               what="no backend left on the test database", why=lambda: pg_backends(pg_url))
    assert cancelled.count(True) > 1


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_closing_an_engine_twice_is_harmless(store: str, tmp_path: Path,
                                              request: pytest.FixtureRequest) -> None:
    url = (f"sqlite+aiosqlite:///{tmp_path / 'twice.db'}" if store == "sqlite"
           else request.getfixturevalue("pg_url"))

    async def run() -> int:
        engine = create_engine(url)
        async with engine.connect() as conn:
            one = (await conn.execute(text("SELECT 1"))).scalar_one()
        await close_engine(engine)
        await close_engine(engine)
        return int(one)

    assert asyncio.run(run()) == 1
