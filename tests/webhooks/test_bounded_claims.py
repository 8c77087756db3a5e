"""A claim reads no more lanes and URLs than its free units need, those whose head came due
first (issue 52 item 5), on SQLite and PostgreSQL: the rows ``OutboxSql.heads`` returns are
counted by key (an ordered lane, or a URL's unordered rows)."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.store.engine import create_engine, upgrade
from ridecast.store.outbox import OutboxSql, outbox_sql
from ridecast.store.tables import events, webhook_deliveries
from ridecast.webhooks.claimer import KEY_SLACK, Claimer
from ridecast.webhooks.jobs import Result, Unit
from ridecast.webhooks.recorder import Recorder

Key = tuple[str, Any]


@pytest.fixture
async def any_engine(store_url: str) -> AsyncIterator[AsyncEngine]:
    await upgrade(store_url)
    engine = create_engine(store_url)
    yield engine
    await engine.dispose()


class Counted:
    """A claimer whose store statements count the lanes and URLs each read of heads
    returned rows of."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.sql: OutboxSql = outbox_sql(engine.dialect.name)
        self.reads: list[set[Key]] = []
        heads = self.sql.heads

        def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
            rows = yield from heads(*args, **kwargs)
            # (id, simulation_id, url, event_id, ordered, status, ...): a stale unordered
            # row (leased, its lease run out) is no key.
            self.reads.append({("lane", r[1]) if r[4] else ("url", r[2])
                               for r in rows if r[4] or r[5] == "pending"})
            return rows

        self.sql.heads = counted  # type: ignore[method-assign]
        self.claimer = Claimer(engine, self.sql, Recorder(engine, self.sql))


async def _store(engine: AsyncEngine, rows: list[tuple[int, str, bool, float]]) -> None:
    """One delivery per (simulation, URL, ordered, due time), in that order of ids."""
    now = time.time()
    async with engine.begin() as conn:
        for sim, url, ordered, due in rows:
            event_id = (await conn.execute(insert(events).values(
                simulation_id=sim, message_type="bookings", created_at=now, body=b"{}",
            ))).inserted_primary_key[0]
            await conn.execute(insert(webhook_deliveries).values(
                event_id=event_id, simulation_id=sim, message_type="bookings", url=url,
                status="pending", attempt_count=0, next_attempt_at=due, created_at=now,
                updated_at=now, ordered=ordered))


def _key(unit: Unit) -> Key:
    job = unit.jobs[0]
    return ("lane", job.simulation_id) if job.ordered else ("url", job.url)


def _succeeded(units: list[Unit]) -> list[Result]:
    now = time.time()
    return [Result(job.delivery_id, "succeeded", 1, now, None, token=job.token,
                   ordered=job.ordered) for unit in units for job in unit.jobs]


async def test_a_claim_reads_the_oldest_lanes_and_urls_its_units_need(
        any_engine: AsyncEngine) -> None:
    """200 free lanes and 200 URLs, one delivery each, due at shuffled times: a claim of 4
    units reads the rows of at most 4 + ``KEY_SLACK`` lanes and URLs and takes the 4 due
    first; claim after claim (each recording the last one's successes), every lane and URL
    is served once, in the order they came due: none starves."""
    order = list(range(400))
    random.Random(52).shuffle(order)
    due0 = time.time() - 1000
    rows = [(n + 1, f"http://lanes{n % 7}/", True, due0 + order[n]) for n in range(200)]
    rows += [(1000 + n, f"http://loose{n}/", False, due0 + order[200 + n]) for n in range(200)]
    await _store(any_engine, rows)
    keys = {due: (("lane", sim) if ordered else ("url", url))
            for sim, url, ordered, due in rows}
    oldest_first = [keys[due] for due in sorted(keys)]
    counted = Counted(any_engine)
    served: list[set[Key]] = []
    units: list[Unit] = []
    for _ in range(120):
        units = await counted.claimer.claim(max_units=4, unit_rows=64, per_endpoint=8,
                                            lease_s=30, record=_succeeded(units))
        if not units:
            break
        served.append({_key(unit) for unit in units})
    assert served, "nothing was claimed"
    assert all(len(read) <= 4 + KEY_SLACK for read in counted.reads), [
        len(read) for read in counted.reads]
    assert served == [set(oldest_first[n:n + 4]) for n in range(0, 400, 4)]


async def test_keys_that_give_no_unit_make_the_claim_read_the_next_ones(
        any_engine: AsyncEngine) -> None:
    """The 50 oldest lanes all go to one URL with a single slot: a claim of 4 units takes one
    of them, then reads further lanes (not the rest of that URL's) for the other three."""
    due0 = time.time() - 1000
    rows = [(n + 1, "http://crowded/", True, due0 + n) for n in range(50)]
    rows += [(100 + n, f"http://own{n}/", True, due0 + 100 + n) for n in range(50)]
    await _store(any_engine, rows)
    counted = Counted(any_engine)
    units = await counted.claimer.claim(max_units=4, unit_rows=64, per_endpoint=1, lease_s=30)
    assert sorted(_key(unit) for unit in units) == [
        ("lane", 1), ("lane", 100), ("lane", 101), ("lane", 102)]
    assert sum(len(read) for read in counted.reads) <= 2 * (4 + KEY_SLACK)
