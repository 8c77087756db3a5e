"""The outbox queries on a real SQLite file: leases, reclaim, release, purge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine, upgrade
from ridecast.store.tables import events, webhook_attempts, webhook_deliveries
from ridecast.webhooks.outbox import Outbox, Result


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'o.db'}"
    await upgrade(url)
    eng = create_engine(url)
    yield eng
    await eng.dispose()


async def _enqueue(engine: AsyncEngine, count: int, url: str = "http://a/") -> None:
    now = time.time()
    async with engine.begin() as conn:
        for i in range(count):
            event_id = (await conn.execute(insert(events).values(
                simulation_id=1, message_type="bookings", created_at=now, body=b'{"i":%d}' % i,
            ))).inserted_primary_key[0]
            await conn.execute(insert(webhook_deliveries).values(
                event_id=event_id, simulation_id=1, message_type="bookings", url=url,
                status="pending", attempt_count=0, next_attempt_at=now, created_at=now,
                updated_at=now))


async def test_claimed_rows_are_leased_and_reclaimed_after_expiry(engine: AsyncEngine) -> None:
    """A claimed row is not claimed again until its lease runs out (a dead worker's rows)."""
    await _enqueue(engine, 3)
    outbox = Outbox(engine)
    first = await outbox.claim(10, lease_s=0.3)
    assert [job.body for job in first] == [b'{"i":0}', b'{"i":1}', b'{"i":2}']
    assert await outbox.claim(10, lease_s=0.3) == []
    await asyncio.sleep(0.4)
    assert len(await outbox.claim(10, lease_s=30)) == 3


async def test_concurrent_claims_never_share_a_row(engine: AsyncEngine) -> None:
    """Claims racing on one database split the rows between them."""
    await _enqueue(engine, 200)
    outbox = Outbox(engine)
    batches = await asyncio.gather(*(outbox.claim(30, lease_s=30) for _ in range(10)))
    ids = [job.delivery_id for batch in batches for job in batch]
    assert len(ids) == len(set(ids)) == 200


async def test_saturated_endpoints_are_skipped_and_release_makes_rows_due(
    engine: AsyncEngine,
) -> None:
    """exclude_urls leaves a busy endpoint's rows; release hands leased rows back at once."""
    await _enqueue(engine, 2, "http://busy/")
    await _enqueue(engine, 2, "http://idle/")
    outbox = Outbox(engine)
    jobs = await outbox.claim(10, lease_s=30, exclude_urls=["http://busy/"])
    assert {job.url for job in jobs} == {"http://idle/"}
    await outbox.release([job.delivery_id for job in jobs])
    assert len(await outbox.claim(10, lease_s=30)) == 4


async def test_purge_removes_old_finished_deliveries_with_attempts(engine: AsyncEngine) -> None:
    """Retention removes finished deliveries and their attempts, never waiting ones."""
    await _enqueue(engine, 3)
    outbox = Outbox(engine)
    jobs = await outbox.claim(3, lease_s=30)
    attempt = {"started_at": 1.0, "latency_ms": 1.0, "status_code": 204, "error_class": None,
               "error": None, "response_body": ""}
    await outbox.record([
        Result(jobs[0].delivery_id, "succeeded", 1, time.time(), None, attempt),
        Result(jobs[1].delivery_id, "failed", 1, time.time(), "HTTP 500", attempt),
        Result(jobs[2].delivery_id, "pending", 1, time.time() + 60, "HTTP 500", attempt),
    ])
    assert await outbox.purge_older_than(time.time() + 1) == 2
    async with engine.connect() as conn:
        left = (await conn.execute(select(webhook_deliveries.c.status))).scalars().all()
        attempts = await conn.scalar(select(func.count()).select_from(webhook_attempts))
    assert left == ["pending"] and attempts == 1
