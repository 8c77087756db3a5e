"""The event log on a real SQLite file: group commit, order, outbox atomicity, retention."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from ridecast.bus import BusMessage, MemoryBus, StoredEvent
from ridecast.store.checkpointer import CHECKPOINT_EVENTS, disable_autocheckpoint
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.eventlog import EventLog, NewEvent, make_frame
from ridecast.store.tables import events, webhook_deliveries
from ridecast.store.txsteps import driver_thread
from tests.waiting import eventually_async


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[tuple[EventLog, list[StoredEvent]]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'log.db'}"
    await upgrade(url)
    bus = MemoryBus()
    published: list[StoredEvent] = []

    def collect(messages: Sequence[BusMessage]) -> None:
        published.extend(m for m in messages if isinstance(m, StoredEvent))

    bus.subscribe(collect)
    engine = create_engine(url)
    event_log = EventLog(engine, bus, max_batch=500)
    await event_log.start()
    yield event_log, published
    await event_log.close()
    await engine.dispose()


def _event(n: int, url: str | None = None) -> NewEvent:
    return NewEvent(simulation_id=1, org_id=1, owner_id=1, message_type="vehicle_use",
                    body=b'{"n":%d}' % n, webhook_url=url)


async def test_concurrent_appends_share_commits_and_publish_in_id_order(
    log: tuple[EventLog, list[StoredEvent]],
) -> None:
    """200 concurrent requests take far fewer commits; the bus sees ids ascending."""
    event_log, published = log
    results = await asyncio.gather(*(event_log.append([_event(i)]) for i in range(200)))
    assert event_log.appended == 200
    assert event_log.commits < 50
    ids = [e.event_id for e in published]
    assert ids == sorted(ids) and len(set(ids)) == 200
    for i, (stored,) in enumerate(results):
        assert stored.body == b'{"n":%d}' % i
        assert stored.frame == b'{"n":%d,"event_id":"%d"}' % (i, stored.event_id)


async def test_batch_is_never_split_and_outbox_rows_commit_with_it(
    log: tuple[EventLog, list[StoredEvent]],
) -> None:
    """A batch lands whole with one delivery row per event that wants a webhook."""
    event_log, _published = log
    stored = await event_log.append([_event(i, "http://127.0.0.1:9/h" if i % 2 else None)
                                     for i in range(10)])
    assert [e.has_webhook for e in stored] == [bool(i % 2) for i in range(10)]
    engine = event_log._engine
    async with engine.connect() as conn:
        rows = (await conn.execute(select(webhook_deliveries.c.event_id))).scalars().all()
    assert sorted(rows) == [e.event_id for e in stored if e.has_webhook]


async def test_failed_write_stores_nothing_and_tells_every_waiter(
    log: tuple[EventLog, list[StoredEvent]],
) -> None:
    """An insert that fails (NOT NULL broken) rejects the whole group; nothing is stored."""
    event_log, published = log
    bad = NewEvent(1, 1, 1, None, b"{}")  # type: ignore[arg-type]
    outcomes = await asyncio.gather(event_log.append([_event(1)]), event_log.append([bad]),
                                    return_exceptions=True)
    assert any(isinstance(o, Exception) for o in outcomes)
    async with event_log._engine.connect() as conn:
        count = await conn.scalar(select(func.count()).select_from(events))
    assert count == len(published) == sum(1 for o in outcomes if isinstance(o, list))
    # the writer survives a failure, and the failed group took no ids (rolled back whole)
    (after,) = await event_log.append([_event(2)])
    assert after.event_id == count + 1


async def test_retention_keeps_events_a_delivery_still_needs(
    log: tuple[EventLog, list[StoredEvent]],
) -> None:
    """Old events go, except those with a pending delivery; ids are never reused."""
    event_log, _published = log
    old = await event_log.append([_event(0), _event(1, "http://127.0.0.1:9/h")])
    async with event_log._engine.begin() as conn:
        await conn.execute(update(events).values(created_at=time.time() - 3600))
    removed = await event_log.purge_older_than(time.time() - 60)
    assert removed == 1
    oldest, newest = await event_log.bounds()
    assert oldest == newest == old[1].event_id
    async with event_log._engine.begin() as conn:
        await conn.execute(update(webhook_deliveries).values(status="succeeded"))
    assert await event_log.purge_older_than(time.time() - 60) == 1
    assert await event_log.bounds() == (0, 0)
    (fresh,) = await event_log.append([_event(2)])
    assert fresh.event_id > old[1].event_id, "an emptied log must not reuse ids (cursors)"


async def test_commits_leave_checkpoints_to_the_checkpointer(
    log: tuple[EventLog, list[StoredEvent]], tmp_path: Path,
) -> None:
    """The writer's commits run no WAL checkpoint (a checkpoint's copy and syncs would hold
    every event of that commit); the checkpointer copies the pages back beside them, once
    enough events were committed."""
    event_log, _published = log
    db_file = tmp_path / "log.db"
    size_before = db_file.stat().st_size
    for start in range(0, CHECKPOINT_EVENTS + 1000, 500):
        await event_log.append([_event(i) for i in range(start, start + 500)])
    # It starts at once past CHECKPOINT_EVENTS.
    await eventually_async(lambda: event_log.checkpoints >= 1, timeout=10,
                           what="a checkpoint by the checkpointer")
    assert db_file.stat().st_size > size_before  # the pages reached the database file


async def test_disable_autocheckpoint_sets_the_connections_pragma(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    await upgrade(url)
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            thread = await driver_thread(conn)
            assert thread is not None
            before = (await conn.exec_driver_sql("PRAGMA wal_autocheckpoint")).scalar()
            await disable_autocheckpoint(thread)
            after = (await conn.exec_driver_sql("PRAGMA wal_autocheckpoint")).scalar()
        assert (before, after) == (1000, 0)
    finally:
        await engine.dispose()


def test_frame_is_the_body_plus_event_id() -> None:
    """make_frame splices event_id into the stored JSON without re-encoding it."""
    import orjson

    frame = make_frame(b'{"a":1,"b":{"c":[1,2]}}', 42)
    assert orjson.loads(frame) == {"a": 1, "b": {"c": [1, 2]}, "event_id": "42"}
