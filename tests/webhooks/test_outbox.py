"""The claim, the record and the delivery log on a real store (SQLite, and PostgreSQL where
named): leases, reclaim, release, purge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.bus import MemoryBus
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.eventlog import EventLog
from ridecast.store.outbox import outbox_sql
from ridecast.store.tables import events, webhook_attempts, webhook_deliveries
from ridecast.webhooks.claimer import Claimer
from ridecast.webhooks.deliverylog import DeliveryLog
from ridecast.webhooks.jobs import Job, Result
from ridecast.webhooks.recorder import Recorder

EXPIRED = -1.0
"""A lease that has run out by the time anyone looks at it: leases are dated by the store's
clock, so a test makes one lapse by claiming with it, not by sleeping past it."""


class Outbox:
    """The claim, the record and the delivery log on one store, as one worker holds them."""

    def __init__(self, engine: AsyncEngine) -> None:
        sql = outbox_sql(engine.dialect.name)
        self.recorder = Recorder(engine, sql)
        self.claimer = Claimer(engine, sql, self.recorder)
        self.log = DeliveryLog(engine, sql)
        self.claim = self.claimer.claim
        self.record = self.recorder.record
        self.release = self.claimer.release
        self.retry = self.log.retry
        self.get = self.log.get
        self.depth = self.log.depth
        self.purge_older_than = self.log.purge_older_than

    async def list(self, simulation_id: int, **filters: Any) -> tuple[list[dict[str, Any]], int]:
        """A page of the delivery log (no byte budget to speak of) and its total."""
        page = await self.log.page(simulation_id, max_chars=1 << 22, **filters)
        return page.rows, page.total


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'o.db'}"
    await upgrade(url)
    eng = create_engine(url)
    yield eng
    await eng.dispose()


async def _enqueue(engine: AsyncEngine, count: int, url: str = "http://a/", *,
                   sim: int = 1, ordered: bool = True) -> None:
    now = time.time()
    async with engine.begin() as conn:
        for i in range(count):
            event_id = (await conn.execute(insert(events).values(
                simulation_id=sim, message_type="bookings", created_at=now,
                body=b'{"i":%d}' % i,
            ))).inserted_primary_key[0]
            await conn.execute(insert(webhook_deliveries).values(
                event_id=event_id, simulation_id=sim, message_type="bookings", url=url,
                status="pending", attempt_count=0, next_attempt_at=now, created_at=now,
                updated_at=now, ordered=ordered))


async def claim(outbox: Outbox, *, units: int = 10, rows: int = 64, per_endpoint: int = 8,
                lease_s: float = 30) -> list[Job]:
    got = await outbox.claim(max_units=units, unit_rows=rows, per_endpoint=per_endpoint,
                             lease_s=lease_s)
    return [job for unit in got for job in unit.jobs]


async def test_claimed_rows_are_leased_and_reclaimed_after_expiry(engine: AsyncEngine) -> None:
    """A claimed row is not claimed again while its lease runs (a live worker's rows), and
    is once it has run out (a dead worker's rows)."""
    await _enqueue(engine, 3)
    outbox = Outbox(engine)
    first = await claim(outbox)
    assert [job.body for job in first] == [b'{"i":0}', b'{"i":1}', b'{"i":2}']
    assert await claim(outbox) == []
    await _enqueue(engine, 3, "http://b/", sim=2)
    dead = await claim(outbox, lease_s=EXPIRED)
    assert [(job.simulation_id, job.body) for job in dead] == [
        (2, b'{"i":0}'), (2, b'{"i":1}'), (2, b'{"i":2}')]
    again = await claim(outbox)
    assert sorted(job.delivery_id for job in again) == sorted(j.delivery_id for j in dead)


async def test_concurrent_claims_never_share_a_row(engine: AsyncEngine) -> None:
    """Claims racing on one database split the rows between them."""
    await _enqueue(engine, 200, ordered=False)
    outbox = Outbox(engine)
    batches = await asyncio.gather(*(claim(outbox, units=2, rows=10, per_endpoint=100)
                                     for _ in range(10)))
    ids = [job.delivery_id for batch in batches for job in batch]
    assert len(ids) == len(set(ids)) == 200


async def test_an_ordered_lane_is_held_by_one_claim_at_a_time(engine: AsyncEngine) -> None:
    """One simulation's ordered deliveries: the head run goes to one claim; the rest waits."""
    await _enqueue(engine, 5, sim=1)
    await _enqueue(engine, 5, sim=2)
    outbox = Outbox(engine)
    first = await claim(outbox, rows=3)
    assert [(j.simulation_id, j.body) for j in first] == [
        (1, b'{"i":0}'), (1, b'{"i":1}'), (1, b'{"i":2}'),
        (2, b'{"i":0}'), (2, b'{"i":1}'), (2, b'{"i":2}')]
    assert await claim(outbox, rows=3) == []  # both lanes are held
    await outbox.record([Result(j.delivery_id, "succeeded", 1, time.time(), None, token=j.token,
                                ordered=j.ordered) for j in first])
    rest = await claim(outbox, rows=3)
    assert sorted(j.body for j in rest) == [b'{"i":3}', b'{"i":3}', b'{"i":4}', b'{"i":4}']


async def test_per_endpoint_limit_counts_units_in_the_store(engine: AsyncEngine) -> None:
    """Two outboxes (two workers) together never hold more units of one URL than the limit."""
    for sim in range(1, 7):
        await _enqueue(engine, 2, "http://same/", sim=sim)
    a, b = Outbox(engine), Outbox(engine)
    first = await a.claim(max_units=10, unit_rows=64, per_endpoint=4, lease_s=30)
    second = await b.claim(max_units=10, unit_rows=64, per_endpoint=4, lease_s=30)
    assert len(first) == 4 and second == []


async def test_release_makes_rows_due_again(engine: AsyncEngine) -> None:
    """release hands leased rows back at once."""
    await _enqueue(engine, 2, "http://idle/", ordered=False)
    outbox = Outbox(engine)
    jobs = await claim(outbox)
    await outbox.release([(job.delivery_id, job.token) for job in jobs])
    assert len(await claim(outbox)) == 2


async def test_a_pending_retry_blocks_its_lane_only(engine: AsyncEngine) -> None:
    """A lane head waiting for its retry holds the lane; another simulation goes on."""
    await _enqueue(engine, 3, sim=1)
    await _enqueue(engine, 1, sim=2)
    outbox = Outbox(engine)
    first = await claim(outbox, rows=1)
    head = next(j for j in first if j.simulation_id == 1)
    other = next(j for j in first if j.simulation_id == 2)
    await outbox.record([
        Result(head.delivery_id, "pending", 1, time.time() + 60, "HTTP 500", token=head.token,
               ordered=head.ordered),
        Result(other.delivery_id, "succeeded", 1, time.time(), None, token=other.token,
               ordered=other.ordered),
    ])
    assert await claim(outbox) == []


async def test_expired_unordered_leases_are_read_when_asked(engine: AsyncEngine) -> None:
    """Unordered rows whose lease ran out are claimed by a claim with ``stale`` (the poll's),
    not by the others; an ordered lane's expired lease is claimed by any claim."""
    await _enqueue(engine, 2, ordered=False)
    await _enqueue(engine, 1, sim=2)
    outbox = Outbox(engine)
    assert len(await claim(outbox, lease_s=EXPIRED)) == 3
    fresh = await outbox.claim(max_units=10, unit_rows=64, per_endpoint=8, lease_s=30,
                               stale=False)
    assert [job.simulation_id for unit in fresh for job in unit.jobs] == [2]
    stale = await outbox.claim(max_units=10, unit_rows=64, per_endpoint=8, lease_s=30)
    assert sorted(job.body for unit in stale for job in unit.jobs) == [b'{"i":0}', b'{"i":1}']


async def test_many_lanes_and_urls_are_all_read(engine: AsyncEngine) -> None:
    """More simulations and URLs than one statement of a claim reads: every lane head and
    every URL's oldest rows are found."""
    for sim in range(1, 80):
        await _enqueue(engine, 2, f"http://h{sim % 3}/", sim=sim)
    for n in range(70):
        await _enqueue(engine, 1, f"http://loose{n}/", sim=500 + n, ordered=False)
    jobs = await claim(Outbox(engine), units=1000, rows=1, per_endpoint=1000)
    assert len(jobs) == 79 + 70
    assert {j.body for j in jobs if j.ordered} == {b'{"i":0}'}


async def test_purge_removes_old_finished_deliveries_with_attempts(engine: AsyncEngine) -> None:
    """Retention removes finished deliveries and their attempts, never waiting ones."""
    await _enqueue(engine, 3)
    outbox = Outbox(engine)
    jobs = await claim(outbox)
    attempt = {"started_at": 1.0, "latency_ms": 1.0, "status_code": 204, "error_class": None,
               "error": None, "response_body": ""}
    await outbox.record([
        Result(jobs[0].delivery_id, "succeeded", 1, time.time(), None,
               success=(1.0, 1.0, 204, ""), token=jobs[0].token, ordered=jobs[0].ordered),
        Result(jobs[1].delivery_id, "failed", 1, time.time(), "HTTP 500", attempt,
               token=jobs[1].token, ordered=jobs[1].ordered),
        Result(jobs[2].delivery_id, "pending", 1, time.time() + 60, "HTTP 500", attempt,
               token=jobs[2].token, ordered=jobs[2].ordered),
    ])
    assert await outbox.purge_older_than(time.time() + 1) == 2
    async with engine.connect() as conn:
        left = (await conn.execute(select(webhook_deliveries.c.status))).scalars().all()
        attempts = await conn.scalar(select(func.count()).select_from(webhook_attempts))
    assert left == ["pending"] and attempts == 1


async def test_racing_claims_on_postgres_respect_the_limit_and_never_share(pg_url: str) -> None:
    """Two engines (two worker processes) claim at once on PostgreSQL: no delivery twice,
    and never more units of one URL in flight than the limit."""
    await upgrade(pg_url)
    engines = [create_engine(pg_url), create_engine(pg_url)]
    try:
        for sim in range(1, 11):
            await _enqueue(engines[0], 5, "http://same/", sim=sim)
        await _enqueue(engines[0], 40, "http://loose/", sim=99, ordered=False)
        outboxes = [Outbox(engine) for engine in engines]
        got = await asyncio.gather(*(
            outboxes[i % 2].claim(max_units=3, unit_rows=4, per_endpoint=3, lease_s=30)
            for i in range(12)))
    finally:
        for engine in engines:
            await engine.dispose()
    units = [unit for batch in got for unit in batch]
    ids = [job.delivery_id for unit in units for job in unit.jobs]
    assert len(ids) == len(set(ids))
    per_url: dict[str, int] = {}
    for unit in units:
        per_url[unit.jobs[0].url] = per_url.get(unit.jobs[0].url, 0) + 1
    assert per_url == {"http://same/": 3, "http://loose/": 3}
    lanes = [unit.jobs[0].simulation_id for unit in units if unit.jobs[0].ordered]
    assert len(lanes) == len(set(lanes))


@pytest.fixture
async def any_engine(store_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated store on SQLite, then on PostgreSQL."""
    url = store_url
    await upgrade(url)
    eng = create_engine(url)
    yield eng
    await eng.dispose()


def _success(started_at: float, status_code: int, body: str = "",
             ) -> tuple[float, float, int, str]:
    """A success as the dispatcher records it (``Result.success``)."""
    return (started_at, 1.5, status_code, body)


def _attempt(started_at: float, status_code: int, body: str = "") -> dict[str, object]:
    return {"started_at": started_at, "latency_ms": 1.5, "status_code": status_code,
            "error_class": None if status_code < 300 else "http_status",
            "error": None if status_code < 300 else f"HTTP {status_code}",
            "response_body": body}


async def test_a_success_is_one_write_on_the_delivery_and_listed_as_an_attempt(
    any_engine: AsyncEngine,
) -> None:
    """A success writes no webhook_attempts row; the log lists it as an attempt all the same,
    after the failures before it, and a replayed delivery's second success keeps the first."""
    await _enqueue(any_engine, 2)
    outbox = Outbox(any_engine)
    first, second = await claim(outbox)
    t = time.time()
    await outbox.record([Result(first.delivery_id, "succeeded", 1, t, None, simulation_id=1,
                                success=_success(t - 1, 200, "ok"), token=first.token,
                                ordered=first.ordered),
                         Result(second.delivery_id, "pending", 1, t - 1, "HTTP 500",
                                _attempt(t - 2, 500, "boom"), token=second.token,
                                ordered=second.ordered)])
    async with any_engine.connect() as conn:
        rows = await conn.scalar(select(func.count()).select_from(webhook_attempts))
    assert rows == 1  # the failure's only
    got = await outbox.get(1, first.delivery_id)
    assert got is not None and got["status"] == "succeeded" and got["attempt_count"] == 1
    assert not any(key.startswith("success_") for key in got)
    assert got["attempts"] == [{
        "id": None, "delivery_id": first.delivery_id, "started_at": t - 1, "latency_ms": 1.5,
        "status_code": 200, "error_class": None, "error": None, "response_body": "ok"}]
    # The retried one succeeds: failure first, success after it.
    (again,) = await claim(outbox)
    await outbox.record([Result(again.delivery_id, "succeeded", 2, t, None, simulation_id=1,
                                success=_success(t, 204), token=again.token,
                                ordered=again.ordered)])
    # The first is replayed and succeeds again: both successes are in its log; the replay
    # started a fresh schedule, so its attempt count is the one attempt since.
    assert (await outbox.retry(1, first.delivery_id) or {}).get("status") == "pending"
    (replayed,) = await claim(outbox)
    assert replayed.attempt_count == 0
    await outbox.record([Result(replayed.delivery_id, "succeeded", 1, t + 1, None,
                                simulation_id=1, success=_success(t + 1, 202),
                                token=replayed.token, ordered=replayed.ordered)])
    listed, total = await outbox.list(1, status=None, message_type=None, limit=10, offset=0)
    assert total == 2
    by_id = {item["id"]: item for item in listed}
    assert [a["status_code"] for a in by_id[second.delivery_id]["attempts"]] == [500, 204]
    assert [a["status_code"] for a in by_id[first.delivery_id]["attempts"]] == [200, 202]
    assert by_id[first.delivery_id]["attempt_count"] == 1


async def test_a_batch_of_successes_keeps_the_earlier_success_of_replayed_rows_only(
    any_engine: AsyncEngine,
) -> None:
    """One batch of successes where some rows hold an earlier success (replayed) and some
    hold none: the earlier ones move to the log as attempts, each row counts the one attempt
    of its (fresh, after the replay) schedule, and the fresh rows gain no attempt row."""
    await _enqueue(any_engine, 6)
    outbox = Outbox(any_engine)
    t = time.time()
    jobs = await claim(outbox, rows=4)
    assert len(jobs) == 4
    await outbox.record([Result(job.delivery_id, "succeeded", 1, t, None, simulation_id=1,
                                success=_success(t - 10 + n, 200, f"first {n}"),
                                token=job.token, ordered=job.ordered)
                         for n, job in enumerate(jobs)])
    replayed = [jobs[0].delivery_id, jobs[2].delivery_id]
    for delivery_id in replayed:
        assert (await outbox.retry(1, delivery_id) or {}).get("status") == "pending"
    batch = await claim(outbox, rows=8)
    async with any_engine.connect() as conn:
        every = set((await conn.execute(select(webhook_deliveries.c.id))).scalars())
    assert {job.delivery_id for job in batch} == (
        set(replayed) | (every - {job.delivery_id for job in jobs}))
    await outbox.record([Result(job.delivery_id, "succeeded", job.attempt_count + 1, t, None,
                                simulation_id=1, success=_success(t + n, 202, f"second {n}"),
                                token=job.token, ordered=job.ordered)
                         for n, job in enumerate(batch)])
    listed, total = await outbox.list(1, status=None, message_type=None, limit=10, offset=0)
    assert total == 6
    codes = {item["id"]: [a["status_code"] for a in item["attempts"]] for item in listed}
    counts = {item["id"]: item["attempt_count"] for item in listed}
    for job in jobs:
        again = job.delivery_id in replayed
        assert codes[job.delivery_id] == ([200, 202] if again else [200])
        assert counts[job.delivery_id] == 1
    fresh = [job.delivery_id for job in batch if job.delivery_id not in replayed]
    assert len(fresh) == 2 and all(codes[i] == [202] and counts[i] == 1 for i in fresh)
    async with any_engine.connect() as conn:
        kept = (await conn.execute(select(webhook_attempts.c.delivery_id,
                                          webhook_attempts.c.response_body))).all()
    assert sorted(kept) == sorted((jobs[n].delivery_id, f"first {n}") for n in (0, 2))


async def test_a_running_chunk_is_extended_under_its_token_in_its_slot(
        any_engine: AsyncEngine) -> None:
    """``extend`` gives a chunk that still holds its lease the next due rows of its URL
    under the same token: the URL's slot count does not change, so it works with the URL
    full; a token whose rows are all recorded holds no slot and gets nothing."""
    await _enqueue(any_engine, 10, "http://x/", ordered=False)
    outbox = Outbox(any_engine)
    [first] = await outbox.claim(max_units=5, unit_rows=4, per_endpoint=1, lease_s=30)
    assert [job.body for job in first.jobs] == [b'{"i":%d}' % i for i in range(4)]
    assert await outbox.claim(max_units=5, unit_rows=4, per_endpoint=1, lease_s=30) == []
    [more] = await outbox.claim(max_units=0, unit_rows=4, per_endpoint=1, lease_s=30,
                                extend=[(first.token, "http://x/")])
    assert more.token == first.token
    assert [job.body for job in more.jobs] == [b'{"i":%d}' % i for i in range(4, 8)]
    assert not any(job.ordered for job in more.jobs)
    done = [Result(job.delivery_id, "succeeded", 1, time.time(), None, token=job.token,
                   ordered=job.ordered)
            for job in [*first.jobs, *more.jobs]]
    # Every row of the token recorded in the same claim: its slot is free, no extension;
    # the plan takes the slot instead, under a new token.
    [fresh] = await outbox.claim(max_units=5, unit_rows=4, per_endpoint=1, lease_s=30,
                                 record=done, extend=[(first.token, "http://x/")])
    assert fresh.token != first.token
    assert [job.body for job in fresh.jobs] == [b'{"i":8}', b'{"i":9}']


async def test_extensions_of_one_url_share_its_rows_like_new_chunks(
        any_engine: AsyncEngine) -> None:
    """Two running chunks ask for more with two rows left: one row each, not both rows to
    the first (the tail of a burst is shared among the slots)."""
    await _enqueue(any_engine, 10, "http://x/", ordered=False)
    outbox = Outbox(any_engine)
    first = await outbox.claim(max_units=2, unit_rows=4, per_endpoint=4, lease_s=30)
    assert [len(unit.jobs) for unit in first] == [4, 4]
    more = await outbox.claim(max_units=0, unit_rows=4, per_endpoint=4, lease_s=30,
                              extend=[(unit.token, "http://x/") for unit in first])
    assert [(unit.token, len(unit.jobs)) for unit in more] == [
        (first[0].token, 1), (first[1].token, 1)]


async def test_a_urls_rows_go_out_as_they_came_due_past_those_waiting_for_a_retry(
        any_engine: AsyncEngine) -> None:
    """A URL's unordered rows are taken in the order they came due, by a new chunk and by an
    extension alike: a retry due a minute ago goes before one due ten seconds ago, whatever
    their event ids, and rows waiting for a retry stay as they are (a claim reads the URL's
    due rows from an index by due time; test_plans.py checks the reads on both stores)."""
    await _enqueue(any_engine, 30, "http://down/", ordered=False)
    await _enqueue(any_engine, 3, "http://up/", sim=2, ordered=False)
    now = time.time()
    d = webhook_deliveries.c
    async with any_engine.begin() as conn:
        down = list((await conn.execute(select(d.id).where(d.url == "http://down/")
                                        .order_by(d.id))).scalars())
        up = list((await conn.execute(select(d.id).where(d.url == "http://up/")
                                      .order_by(d.id))).scalars())
        # A receiver that was down: every row waits for its third try in an hour, but two.
        await conn.execute(webhook_deliveries.update().where(d.url == "http://down/")
                           .values(attempt_count=2, next_attempt_at=now + 3600))
        for delivery_id, due in ((down[29], now - 60), (down[4], now - 10)):
            await conn.execute(webhook_deliveries.update().where(d.id == delivery_id)
                               .values(next_attempt_at=due))
    outbox = Outbox(any_engine)
    first = await outbox.claim(max_units=10, unit_rows=1, per_endpoint=1, lease_s=30)
    assert [[job.delivery_id for job in unit.jobs] for unit in first] == [[down[29]], [up[0]]]
    [more] = await outbox.claim(max_units=0, unit_rows=1, per_endpoint=1, lease_s=30,
                                extend=[(first[0].token, "http://down/")])
    assert [job.delivery_id for job in more.jobs] == [down[4]]
    async with any_engine.connect() as conn:
        waiting = (await conn.execute(select(d.status, d.attempt_count, func.count()).where(
            d.url == "http://down/", d.id.not_in([down[4], down[29]]))
            .group_by(d.status, d.attempt_count))).all()
    assert [tuple(row) for row in waiting] == [("pending", 2, 28)]


async def test_depth_and_event_retention_see_every_unfinished_delivery(
    any_engine: AsyncEngine,
) -> None:
    """Every status in both modes: the queue depth counts the pending and in-flight rows,
    and the event log's retention keeps exactly their events (both read partial indexes)."""
    old = time.time() - 3600
    unfinished: set[int] = set()
    async with any_engine.begin() as conn:
        for status in ("pending", "delivering", "succeeded", "failed", "disabled"):
            for ordered in (True, False):
                event_id = (await conn.execute(insert(events).values(
                    simulation_id=1, message_type="bookings", created_at=old, body=b"{}",
                ))).inserted_primary_key[0]
                leased = status == "delivering"
                await conn.execute(insert(webhook_deliveries).values(
                    event_id=event_id, simulation_id=1, message_type="bookings",
                    url="http://a/", status=status, attempt_count=0, next_attempt_at=old,
                    created_at=old, updated_at=old, ordered=ordered,
                    claim_token="t" if leased else None,
                    lease_until=time.time() + 30 if leased else None))
                if status in ("pending", "delivering"):
                    unfinished.add(event_id)
        fresh = (await conn.execute(insert(events).values(
            simulation_id=1, message_type="bookings", created_at=time.time(), body=b"{}",
        ))).inserted_primary_key[0]
        unfinished.add(fresh)  # created since the cutoff: no sweep takes it yet
    assert await Outbox(any_engine).depth() == 4
    assert await EventLog(any_engine, MemoryBus()).purge_older_than(time.time() - 60) == 6
    async with any_engine.connect() as conn:
        left = set((await conn.execute(select(events.c.id))).scalars())
    assert left == unfinished


async def test_purge_reads_only_rows_created_before_the_cutoff(any_engine: AsyncEngine) -> None:
    """Finished rows older than the cutoff go; a row created or changed since stays."""
    now = time.time()
    rows = [("succeeded", now - 3600, now - 3600), ("failed", now - 3600, now - 3600),
            ("succeeded", now - 3600, now), ("succeeded", now, now)]
    async with any_engine.begin() as conn:
        for n, (status, created, updated) in enumerate(rows):
            await conn.execute(insert(webhook_deliveries).values(
                event_id=n + 1, simulation_id=1, message_type="bookings", url="http://a/",
                status=status, attempt_count=1, next_attempt_at=updated, created_at=created,
                updated_at=updated, ordered=True))
    assert await Outbox(any_engine).purge_older_than(now - 60) == 2
    async with any_engine.connect() as conn:
        left = (await conn.execute(
            select(webhook_deliveries.c.event_id).order_by(webhook_deliveries.c.id)
        )).scalars().all()
    assert left == [3, 4]


async def test_the_log_counts_what_it_may_show_exactly_and_history_up_to_its_limit(
    any_engine: AsyncEngine,
) -> None:
    """The delivery log's counts of pending, delivering, failed and disabled deliveries are
    exact (each read from the rows it counts), and so are their pages, the oldest pending
    ones included (the dashboard reads them with an offset); succeeded deliveries, or all of
    them, are counted among the simulation's newest (the log's limit), and past it the
    count says it is a lower bound."""
    await _enqueue(any_engine, 14)                                   # sim 1, ordered
    await _enqueue(any_engine, 3, "http://b/", ordered=False)        # sim 1, unordered
    await _enqueue(any_engine, 4, sim=2)
    sql = outbox_sql(any_engine.dialect.name)
    log = DeliveryLog(any_engine, sql, count_limit=5)
    outbox = Outbox(any_engine)
    async with any_engine.begin() as conn:
        ids = list((await conn.execute(
            select(webhook_deliveries.c.id).where(webhook_deliveries.c.simulation_id == 1)
            .order_by(webhook_deliveries.c.id))).scalars())
        # Ordered: 2 failed, 1 disabled, 4 pending, then 7 succeeded; 3 unordered pending.
        for status, chosen in (("failed", ids[:2]), ("disabled", ids[2:3]),
                               ("succeeded", ids[7:14])):
            await conn.execute(webhook_deliveries.update()
                               .where(webhook_deliveries.c.id.in_(chosen))
                               .values(status=status))
    # The ordered lane's unit leases its last row; the unordered chunk each of its rows.
    jobs = [job for job in await claim(outbox, rows=2) if job.simulation_id == 1]
    leased = {job.delivery_id for job in jobs if not job.ordered} | {
        max(job.delivery_id for job in jobs if job.ordered)}
    async with any_engine.connect() as conn:
        truth = {status: [i for (i,) in (await conn.execute(
            select(webhook_deliveries.c.id).where(webhook_deliveries.c.simulation_id == 1,
                                                  webhook_deliveries.c.status == status)
            .order_by(webhook_deliveries.c.id.desc()))).all()]
            for status in ("pending", "delivering", "succeeded", "failed", "disabled")}
    assert set(truth["delivering"]) == leased and truth["pending"]
    for status in ("pending", "delivering", "failed", "disabled"):
        page = await log.page(1, status=status, message_type=None, limit=100,
                              max_chars=1 << 22)
        assert [row["id"] for row in page.rows] == truth[status], status
        assert (page.total, page.total_exact) == (len(truth[status]), True), status
    oldest = await log.page(1, status="pending", message_type=None, limit=2,
                            offset=len(truth["pending"]) - 2, max_chars=1 << 22)
    assert [row["id"] for row in oldest.rows] == truth["pending"][-2:]
    typed = await log.page(1, status="pending", message_type="vehicle_use", limit=5,
                           max_chars=1 << 22)
    assert (typed.rows, typed.total, typed.total_exact) == ([], 0, True)
    # Past the limit (5): of simulation 1's newest 6 deliveries, the 3 unordered ones and
    # 3 of the 7 succeeded; 17 in all.
    newest = sorted(ids, reverse=True)[:6]
    assert len(set(newest) & set(truth["succeeded"])) == 3 and len(ids) == 17
    succeeded = await log.page(1, status="succeeded", message_type=None, limit=4,
                               max_chars=1 << 22)
    assert [row["id"] for row in succeeded.rows] == truth["succeeded"][:4]
    assert (succeeded.total, succeeded.total_exact) == (3, False)
    every = await log.page(1, status=None, message_type=None, limit=3, max_chars=1 << 22)
    assert (len(every.rows), every.total, every.total_exact) == (3, 5, False)
    # Within the limit, exact: simulation 2 has 4 deliveries.
    other = await log.page(2, status=None, message_type=None, limit=10, max_chars=1 << 22)
    assert (len(other.rows), other.total, other.total_exact) == (4, 4, True)
    # Its lane's unit (the first claim above) leases its last row; the rest stay pending.
    mine = await log.page(2, status="pending", message_type="bookings", limit=10,
                          max_chars=1 << 22)
    assert (mine.total, mine.total_exact) == (3, True)
