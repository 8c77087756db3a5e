"""The interleavings of claims, results, retries and releases that many workers produce, run
step by step against the real store (SQLite, then PostgreSQL): every write on a leased
delivery holds its claim, so a stale worker's write changes nothing.

A lease that "ran out" is made by claiming with a lease already in the past, so the order of
events is fixed by the test, not by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from unittest import mock

import pytest
from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.errors import ServiceUnavailable
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.outbox import outbox_sql
from ridecast.store.tables import events, webhook_attempts, webhook_deliveries
from ridecast.store.txsteps import Query, _async_run
from ridecast.webhooks.health import EndpointHealth
from ridecast.webhooks.jobs import Job, Result
from tests.waiting import eventually_async

from .test_outbox import Outbox

D = webhook_deliveries
EXPIRED = -1.0  # a lease that has run out by the time anyone looks at it
FAILED = {"started_at": 1.0, "latency_ms": 1.0, "status_code": 500,
          "error_class": "http_status", "error": "HTTP 500", "response_body": "no"}


@pytest.fixture
async def engine(store_url: str) -> AsyncIterator[AsyncEngine]:
    await upgrade(store_url)
    eng = create_engine(store_url)
    yield eng
    await eng.dispose()


async def _enqueue(engine: AsyncEngine, count: int, *, sim: int = 1, ordered: bool = True,
                   url: str = "http://a/") -> None:
    now = time.time()
    async with engine.begin() as conn:
        for i in range(count):
            event_id = (await conn.execute(insert(events).values(
                simulation_id=sim, message_type="bookings", created_at=now,
                body=b'{"i":%d}' % i))).inserted_primary_key[0]
            await conn.execute(insert(D).values(
                event_id=event_id, simulation_id=sim, message_type="bookings", url=url,
                status="pending", attempt_count=0, next_attempt_at=now, created_at=now,
                updated_at=now, ordered=ordered))


async def _jobs(outbox: Outbox, lease_s: float = 30.0, **kwargs: object) -> list[Job]:
    units = await outbox.claim(max_units=10, unit_rows=64, per_endpoint=8, lease_s=lease_s,
                               **kwargs)  # type: ignore[arg-type]
    return [job for unit in units for job in unit.jobs]


async def _rows(engine: AsyncEngine) -> dict[int, tuple[str, str | None, int, str]]:
    async with engine.connect() as conn:
        found = await conn.execute(select(D.c.id, D.c.status, D.c.claim_token,
                                          D.c.attempt_count, D.c.url))
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in found}


async def _attempt_rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(webhook_attempts)) or 0)


def _ok(job: Job) -> Result:
    return Result(job.delivery_id, "succeeded", job.attempt_count + 1, time.time(), None,
                  simulation_id=job.simulation_id, success=(time.time(), 1.0, 200, "ok"),
                  token=job.token, ordered=job.ordered)


def _retry_later(job: Job) -> Result:
    return Result(job.delivery_id, "pending", job.attempt_count + 1, time.time() + 60,
                  "HTTP 500", dict(FAILED), token=job.token, ordered=job.ordered)


async def test_a_late_result_after_expiry_changes_nothing(engine: AsyncEngine) -> None:
    """Worker A's lease runs out, B claims the lane; A's late success, failure, release and
    renewal all change nothing (no attempt logged against B's claim); B's result counts."""
    await _enqueue(engine, 2)
    a, b = Outbox(engine), Outbox(engine)
    stale = await _jobs(a, EXPIRED)
    fresh = await _jobs(b)
    assert [j.delivery_id for j in fresh] == [j.delivery_id for j in stale]
    assert {j.token for j in fresh}.isdisjoint({j.token for j in stale})
    before = await _rows(engine)
    await a.record([_ok(stale[0]), _retry_later(stale[1])])
    await a.release([(j.delivery_id, j.token) for j in stale])
    assert not await a.claimer.renew(stale[0].token, [stale[0].delivery_id], time.time() + 60)
    assert await _rows(engine) == before
    assert await _attempt_rows(engine) == 0
    got = await a.get(1, stale[0].delivery_id)
    assert got is not None and got["attempts"] == []
    await b.record([_ok(j) for j in fresh])
    assert {status for status, *_ in (await _rows(engine)).values()} == {"succeeded"}


async def test_a_retry_request_never_takes_a_delivery_in_flight(engine: AsyncEngine) -> None:
    """A replay of a delivery being sent is refused and changes nothing; the sender's result
    then counts. A replay of a delivery waiting for its retry starts a fresh schedule, due
    now, and the next claim takes it."""
    await _enqueue(engine, 1)
    outbox = Outbox(engine)
    (job,) = await _jobs(outbox)
    before = await _rows(engine)
    assert await outbox.retry(1, job.delivery_id) is False
    assert await outbox.retry(1, 999_999) is None
    assert await _rows(engine) == before
    await outbox.record([_retry_later(job)])
    assert (await _rows(engine))[job.delivery_id][:3] == ("pending", None, 1)
    assert await _jobs(outbox) == []  # its retry is a minute away
    assert (await outbox.retry(1, job.delivery_id) or {}).get("status") == "pending"
    assert (await _rows(engine))[job.delivery_id][:3] == ("pending", None, 0)
    (again,) = await _jobs(outbox)
    assert again.delivery_id == job.delivery_id and again.attempt_count == 0


async def test_a_retry_after_a_new_claim_is_refused(engine: AsyncEngine) -> None:
    """Expiry, then a claim by B, then a replay request: refused (B is sending it)."""
    await _enqueue(engine, 1)
    a, b = Outbox(engine), Outbox(engine)
    await _jobs(a, EXPIRED)
    (job,) = await _jobs(b)
    assert await a.retry(1, job.delivery_id) is False
    assert (await _rows(engine))[job.delivery_id][:2] == ("delivering", job.token)


async def test_a_release_after_a_new_claim_leaves_it(engine: AsyncEngine) -> None:
    """A gives back rows B has claimed since A's lease ran out: B keeps them; a release by
    the claim that holds them makes them due at once."""
    await _enqueue(engine, 3, ordered=False)
    a, b = Outbox(engine), Outbox(engine)
    stale = await _jobs(a, EXPIRED)
    fresh = await _jobs(b)
    assert sorted(j.delivery_id for j in fresh) == sorted(j.delivery_id for j in stale)
    await a.release([(j.delivery_id, j.token) for j in stale])
    rows = await _rows(engine)
    assert {j.delivery_id: ("delivering", j.token) for j in fresh} == {
        i: (status, token) for i, (status, token, _c, _u) in rows.items()}
    await b.release([(j.delivery_id, j.token) for j in fresh])
    assert len(await _jobs(a)) == 3


async def test_a_url_change_is_one_statement_that_leaves_other_claims_alone(
    engine: AsyncEngine,
) -> None:
    """A repoint moves the simulation's waiting rows and the caller's own rows to the new
    URL; rows another worker holds, by row or by its lane lease, keep theirs until that
    worker repoints them."""
    await _enqueue(engine, 2, sim=1)
    await _enqueue(engine, 2, sim=2)
    a, b = Outbox(engine), Outbox(engine)
    jobs = await a.claim(max_units=10, unit_rows=1, per_endpoint=8, lease_s=30)
    mine = next(unit for unit in jobs if unit.jobs[0].simulation_id == 1).jobs[0]
    other = next(unit for unit in jobs if unit.jobs[0].simulation_id == 2).jobs[0]
    await b.claimer.repoint(1, "http://b/", "not-a-claim")
    await a.claimer.repoint(2, "http://b/", mine.token)  # not the claim of sim 2's lane
    rows = await _rows(engine)
    assert rows[mine.delivery_id][3] == "http://a/"  # held by a, repointed by b: kept
    assert rows[other.delivery_id][3] == "http://a/"
    by_sim = await _urls_by_simulation(engine)
    assert by_sim[1] == by_sim[2] == ["http://a/", "http://a/"]  # lanes held by a: kept
    await a.claimer.repoint(1, "http://b/", mine.token)
    assert (await _urls_by_simulation(engine))[1] == ["http://b/", "http://b/"]


async def _urls_by_simulation(engine: AsyncEngine) -> dict[int, list[str]]:
    async with engine.connect() as conn:
        found = await conn.execute(select(D.c.simulation_id, D.c.url).order_by(D.c.id))
    urls: dict[int, list[str]] = {}
    for sim, url in found:
        urls.setdefault(sim, []).append(url)
    return urls


async def test_a_repoint_leaves_the_pending_rows_of_a_lane_held_elsewhere(
    engine: AsyncEngine,
) -> None:
    """Worker A holds an ordered lane (its unit's last row leased, the rows ahead of it
    pending while A sends them). B's repoint of the simulation leaves the whole unit on A's
    URL; A's own repoint then moves it; once A's lane lease has run out, anyone's does."""
    await _enqueue(engine, 3)
    a, b = Outbox(engine), Outbox(engine)
    jobs = await _jobs(a)
    assert [(await _rows(engine))[j.delivery_id][0] for j in jobs] == [
        "pending", "pending", "delivering"]
    await b.claimer.repoint(1, "http://b/", "b-token")
    assert (await _urls_by_simulation(engine))[1] == ["http://a/"] * 3
    await a.claimer.repoint(1, "http://c/", jobs[0].token)
    assert (await _urls_by_simulation(engine))[1] == ["http://c/"] * 3
    await _enqueue(engine, 2, sim=2)
    stale = await _jobs(b, EXPIRED)
    assert [j.simulation_id for j in stale] == [2, 2]
    await a.claimer.repoint(2, "http://d/", "someone-else")
    # The pending row is free to move (the lane lease ran out); the leased one is b's.
    assert (await _urls_by_simulation(engine))[2] == ["http://d/", "http://a/"]


async def test_a_disable_leaves_the_pending_rows_of_a_lane_held_elsewhere(
    engine: AsyncEngine,
) -> None:
    """An endpoint disabled by worker B leaves the waiting rows of an ordered lane that
    worker A holds under its lane lease (A finds the endpoint disabled when it sends them);
    A's own disable (the worker that got the 410) marks them."""
    await _enqueue(engine, 3)
    a, b = Outbox(engine), Outbox(engine)
    units = await a.claim(max_units=10, unit_rows=2, per_endpoint=8, lease_s=30)
    jobs = [job for unit in units for job in unit.jobs]
    assert len(jobs) == 2
    before = await _rows(engine)
    assert await b.log.disable_pending(1, "gone", "b-token") == 0  # the lane is A's
    assert await _rows(engine) == before
    # A's own disable: the waiting rows of its lane, not the row its lease is on.
    assert await a.log.disable_pending(1, "gone", jobs[0].token) == 2
    assert sorted(status for status, *_ in (await _rows(engine)).values()) == [
        "delivering", "disabled", "disabled"]


async def test_a_stale_success_leaves_the_failing_clock_alone(engine: AsyncEngine) -> None:
    """Worker A's lease runs out and B takes the delivery; A's late success writes nothing,
    so the endpoint's failing streak (started by B's failures) goes on; B's success ends
    it."""
    await _enqueue(engine, 1)
    a, b = Outbox(engine), Outbox(engine)
    health = EndpointHealth(engine, quiet_gap_s=600)
    (stale,) = await _jobs(a, EXPIRED)
    (fresh,) = await _jobs(b)
    await health.failed(1, "http://a/", time.time())
    await a.record([_ok(stale)])
    assert await health.failing_since(1) is not None
    await b.record([_ok(fresh)])
    assert await health.failing_since(1) is None


async def test_a_stale_success_in_a_batch_ends_only_the_streaks_it_wrote(
    engine: AsyncEngine,
) -> None:
    """One record with a stale success (simulation 1) and a held one (simulation 2): only
    simulation 2's failing streak ends."""
    await _enqueue(engine, 1, sim=1)
    a, b = Outbox(engine), Outbox(engine)
    health = EndpointHealth(engine, quiet_gap_s=600)
    (stale,) = await _jobs(a, EXPIRED)
    await _jobs(b)
    await _enqueue(engine, 1, sim=2)
    (held,) = await _jobs(a)
    for sim in (1, 2):
        await health.failed(sim, "http://a/", time.time())
    await a.record([_ok(stale), _ok(held)])
    assert await health.failing_since(1) is not None
    assert await health.failing_since(2) is None


async def test_a_lease_is_dated_after_the_claim_holds_its_locks(engine: AsyncEngine) -> None:
    """The lease written is the claim's lease from the moment the rows were taken (by the
    store's clock): never already run out when the claim returns, and the unit's own view
    of it (this node's clock) never ends after it."""
    await _enqueue(engine, 1)
    (unit,) = await Outbox(engine).claim(max_units=1, unit_rows=1, per_endpoint=1,
                                         lease_s=30)
    async with engine.connect() as conn:
        lease, updated = (await conn.execute(select(D.c.lease_until, D.c.updated_at))).one()
    assert unit.lease_until <= lease < unit.lease_until + 1
    assert abs(lease - updated - 30) < 1e-6
    assert lease > time.time() + 29


async def test_postgres_claims_skip_what_a_stalled_transaction_holds(pg_url: str) -> None:
    """On PostgreSQL, a transaction that holds a lane's rows (a worker stopped mid-claim)
    and one that holds a URL's claim lock make another worker's claim skip exactly those,
    never wait for them: it takes the other lane and the other URL at once."""
    await upgrade(pg_url)
    engine, stalled = create_engine(pg_url), create_engine(pg_url)
    try:
        await _enqueue(engine, 2, sim=1, url="http://a/")
        await _enqueue(engine, 2, sim=2, url="http://a/")
        await _enqueue(engine, 2, sim=3, url="http://locked/")
        async with stalled.connect() as conn, conn.begin():
            await conn.execute(text("SELECT id FROM webhook_deliveries WHERE simulation_id = 1 "
                                    "FOR UPDATE"))
            await conn.execute(text("SELECT pg_advisory_xact_lock(:space, hashtext(:url))"),
                               {"space": 0x72637768, "url": "http://locked/"})
            units = await asyncio.wait_for(Outbox(engine).claim(
                max_units=10, unit_rows=64, per_endpoint=8, lease_s=30), timeout=30)
        assert [unit.jobs[0].simulation_id for unit in units] == [2]
        # Once the stalled transaction is gone, the rest is claimed.
        rest = await Outbox(engine).claim(max_units=10, unit_rows=64, per_endpoint=8,
                                          lease_s=30)
        assert sorted(unit.jobs[0].simulation_id for unit in rest) == [1, 3]
    finally:
        await engine.dispose()
        await stalled.dispose()


async def test_postgres_a_worker_stopped_inside_a_renewal_holds_nothing_for_long(
    pg_url: str,
) -> None:
    """On PostgreSQL, a worker stopped inside a renewal's transaction (its UPDATE run, its
    COMMIT never sent) locks its rows; the server ends that transaction after the hold
    time, so another worker's claim takes the lane once the lease has run out, rather than
    skipping it for as long as the worker is stopped."""
    await upgrade(pg_url)
    engine, stalled = create_engine(pg_url), create_engine(pg_url)
    sql = outbox_sql("postgresql", hold_s=0.3)
    try:
        await _enqueue(engine, 2, sim=1)
        # A short lease, still running when the renewal starts (an ordered unit's lease that
        # has run out is not renewed); the other worker takes the lane once it has run out.
        stale, second = await _jobs(Outbox(engine), 10.0)
        async with stalled.connect() as conn:
            await conn.begin()
            steps = sql.held(sql.renew(stale.token, time.time(), time.time() + 30))
            sent: object = None
            with contextlib.suppress(StopIteration):
                while True:
                    step = steps.send(sent)
                    assert isinstance(step, Query) and isinstance(step.sql, str)
                    result = await conn.execute(text(step.sql), dict(step.params))
                    sent = [tuple(row) for row in result] if result.returns_rows else []
            assert sent  # the renewal found the rows: they are locked until its commit
            other = Outbox(engine)
            taken = await eventually_async(lambda: _jobs(other), timeout=60, step=0.01,
                                           what="the other worker claiming the stale rows")
            assert [job.delivery_id for job in taken] == [stale.delivery_id, second.delivery_id]
            with pytest.raises(ServiceUnavailable):  # the stopped worker's transaction was ended
                await conn.commit()
    finally:
        await engine.dispose()
        await stalled.dispose()


async def test_postgres_a_worker_stopped_inside_a_failure_clock_update_blocks_no_record(
    pg_url: str,
) -> None:
    """On PostgreSQL, a worker stopped inside the transaction that moves an endpoint's
    failing clock holds that clock's row lock; another worker's record of a success of the
    same simulation (which ends the clock) waits only until the server ends the stopped
    transaction, not for as long as the worker is stopped."""
    await upgrade(pg_url)
    engine, stalled = create_engine(pg_url), create_engine(pg_url)
    try:
        await _enqueue(engine, 1, sim=1)
        outbox = Outbox(engine)
        (job,) = await _jobs(outbox)
        health = EndpointHealth(stalled, quiet_gap_s=600, hold_s=0.3)
        since = await health.failed(1, job.url, time.time())  # the clock runs
        async with stalled.connect() as conn:
            await conn.begin()
            # The clock's statements one by one in this open transaction (txsteps' own
            # statement-by-statement runner), which the worker then never ends.
            failure = health.failure(1, job.url, time.time())
            assert await _async_run(conn, conn.dialect, failure, {}) == since
            # The worker stops here, its transaction open and the clock's row locked.
            await asyncio.wait_for(outbox.record([_ok(job)]), timeout=30)
            with pytest.raises(ServiceUnavailable):  # the stopped worker's transaction ended
                await conn.commit()
        assert (await _rows(engine))[job.delivery_id][:2] == ("succeeded", None)
        assert await EndpointHealth(engine, quiet_gap_s=600).failing_since(1) is None
    finally:
        await engine.dispose()
        await stalled.dispose()


async def test_postgres_a_renewal_skips_rows_its_own_record_is_writing(pg_url: str) -> None:
    """On PostgreSQL, a unit renews its lease while its worker's claim transaction is
    recording one of the unit's results (that row locked, not yet committed): the renewal
    renews the other rows at once instead of waiting for that transaction (which could be
    waiting for a row the renewal locked: a deadlock, the lease running out meanwhile)."""
    await upgrade(pg_url)
    engine, cycle = create_engine(pg_url), create_engine(pg_url)
    try:
        await _enqueue(engine, 2, sim=1)
        outbox = Outbox(engine)
        first, second = await _jobs(outbox)
        async with cycle.connect() as conn:
            await conn.begin()
            await conn.execute(text("UPDATE webhook_deliveries SET status = 'succeeded', "
                                    "claim_token = NULL WHERE id = :id"),
                               {"id": first.delivery_id})
            later = time.time() + 60
            kept = await asyncio.wait_for(outbox.claimer.keep(first.token, later), 10)
            assert kept == {second.delivery_id}
            await conn.commit()
        async with engine.connect() as conn:
            leases = dict((await conn.execute(select(D.c.id, D.c.lease_until))).all())
        # Renewed as long as asked, dated by the store's clock (read after this one's).
        assert later <= leases[second.delivery_id] < later + 1
        assert (await _rows(engine))[first.delivery_id][:2] == ("succeeded", None)
    finally:
        await engine.dispose()
        await cycle.dispose()


# ---- an ordered unit is leased by its last row (claims.leased_rows) ----------------------


async def test_an_ordered_unit_is_leased_by_its_last_row(engine: AsyncEngine) -> None:
    """A lane's unit leases its last row only; the rows before it stay pending while they
    are sent, the lane counts as held (no other claim plans it), and their results are
    written under the unit's token. A delivery to retry gives the rest of the lane back."""
    await _enqueue(engine, 4)
    a, b = Outbox(engine), Outbox(engine)
    jobs = await _jobs(a)
    token = jobs[0].token
    rows = await _rows(engine)
    assert [rows[j.delivery_id][:2] for j in jobs] == [
        ("pending", None), ("pending", None), ("pending", None), ("delivering", token)]
    assert await _jobs(b) == []  # the lane is held
    await a.record([_ok(jobs[0]), _retry_later(jobs[1])])
    rows = await _rows(engine)
    assert rows[jobs[0].delivery_id][:3] == ("succeeded", None, 1)
    assert rows[jobs[1].delivery_id][:3] == ("pending", None, 1)
    assert await _attempt_rows(engine) == 1  # the failed attempt, logged
    assert await _jobs(b) == []  # still held: the dispatcher gives the rest back next
    await a.release([(j.delivery_id, j.token) for j in jobs[2:]])
    assert {status for status, *_ in (await _rows(engine)).values()} == {
        "succeeded", "pending"}
    assert await _jobs(b) == []  # free now, but its head waits a minute for its retry


async def test_a_stale_ordered_unit_writes_none_of_its_pending_rows(
    engine: AsyncEngine,
) -> None:
    """Worker A's lane lease runs out: before and after B takes the lane (re-leasing A's
    last row under B's token), A's results for the pending rows of its unit change nothing,
    and A's renewal fails though no one else holds the lane yet; B's results count."""
    await _enqueue(engine, 3)
    a, b = Outbox(engine), Outbox(engine)
    stale = await _jobs(a, EXPIRED)
    before = await _rows(engine)
    await a.record([_ok(stale[0])])  # successes alone (PostgreSQL: found in their statement)
    await a.record([_ok(stale[0]), _retry_later(stale[1])])
    assert await _rows(engine) == before
    assert not await a.claimer.renew(stale[0].token, [j.delivery_id for j in stale],
                                     time.time() + 60, lane=True)
    fresh = await _jobs(b)
    assert [j.delivery_id for j in fresh] == [j.delivery_id for j in stale]
    rows = await _rows(engine)
    assert rows[fresh[-1].delivery_id][:2] == ("delivering", fresh[0].token)
    await a.record([_ok(j) for j in stale])
    assert await _rows(engine) == rows
    assert await _attempt_rows(engine) == 0
    await b.record([_ok(j) for j in fresh])
    assert {status for status, *_ in (await _rows(engine)).values()} == {"succeeded"}


async def test_an_unordered_lease_that_ran_out_is_renewed_while_no_one_took_it(
    engine: AsyncEngine,
) -> None:
    """Unlike a lane's lease, an unordered chunk's rows are renewed after their lease ran
    out while no other claim took them (each row is leased on its own)."""
    await _enqueue(engine, 1, ordered=False)
    (job,) = await _jobs(Outbox(engine), EXPIRED)
    assert await Outbox(engine).claimer.renew(job.token, [job.delivery_id], time.time() + 60)


async def test_a_lane_taken_past_the_old_units_last_row_leaves_that_row_to_no_one(
    engine: AsyncEngine,
) -> None:
    """A's unit of three runs out; B's unit of two (a shorter unit, as after a replayed
    delivery went ahead of the lane) leaves A's last row leased to A's run-out lease. A can
    neither renew it nor write the rows B now sends; the lane is B's alone, and A's old row
    is taken (re-leased) by the claim that reaches it."""
    await _enqueue(engine, 3)
    a, b = Outbox(engine), Outbox(engine)
    stale = await _jobs(a, EXPIRED)
    units = await b.claim(max_units=10, unit_rows=2, per_endpoint=8, lease_s=30)
    fresh = [job for unit in units for job in unit.jobs]
    assert [j.delivery_id for j in fresh] == [j.delivery_id for j in stale[:2]]
    assert not await a.claimer.renew(stale[0].token, [j.delivery_id for j in stale],
                                     time.time() + 60, lane=True)
    before = await _rows(engine)
    await a.record([_ok(stale[0]), _retry_later(stale[1])])
    assert await _rows(engine) == before
    assert await _jobs(Outbox(engine)) == []  # B holds the lane
    await b.record([_ok(j) for j in fresh])
    (last,) = await _jobs(b)
    assert last.delivery_id == stale[2].delivery_id and last.token != stale[2].token
    assert (await _rows(engine))[last.delivery_id][:2] == ("delivering", last.token)


async def test_postgres_a_record_holding_a_lane_keeps_claims_off_it_not_its_renewal(
    pg_url: str,
) -> None:
    """On PostgreSQL, a worker's record that found its lane lease held keeps it (``FOR KEY
    SHARE``) until it commits: the worker's own renewal goes through at once, and another
    worker's claim skips the lane even once the lease has run out, never waits for it; after
    the record commits, the claim takes the lane."""
    await upgrade(pg_url)
    engine, cycle = create_engine(pg_url), create_engine(pg_url)
    sql = outbox_sql("postgresql")
    try:
        await _enqueue(engine, 2, sim=1)
        outbox = Outbox(engine)
        jobs = await _jobs(outbox)
        async with cycle.connect() as conn:
            await conn.begin()
            held = await _async_run(conn, conn.dialect,
                                    sql.lanes_held([jobs[0].token], time.time()), {})
            assert held == {jobs[0].token}
            kept = await asyncio.wait_for(
                outbox.claimer.keep(jobs[0].token, time.time() + 60), 10)
            assert kept == {jobs[-1].delivery_id}
            async with engine.begin() as other:  # the lease runs out
                await other.execute(text("UPDATE webhook_deliveries SET lease_until = 0 "
                                         "WHERE status = 'delivering'"))
            assert await asyncio.wait_for(_jobs(Outbox(engine)), 10) == []
            await conn.commit()
        taken = await _jobs(Outbox(engine))
        assert [j.delivery_id for j in taken] == [j.delivery_id for j in jobs]
    finally:
        await engine.dispose()
        await cycle.dispose()


@contextlib.contextmanager
def _node_clock(offset_s: float) -> Iterator[None]:
    """This process's wall clock ``offset_s`` away from the store's, while a worker acts:
    a node whose clock is off (the store keeps its own)."""
    real = time.time
    with mock.patch("time.time", lambda: real() + offset_s):
        yield


async def test_leases_keep_the_stores_clock_whatever_the_nodes_say(engine: AsyncEngine) -> None:
    """A worker 30 s behind the store takes a unit; a worker 30 s ahead takes nothing of it
    while its lease lives. A worker 30 s ahead takes a unit with a lease that runs out at
    once; a worker 30 s behind takes it over at once, not 60 s later. The unit's lease, as
    the dispatcher sees it, never outlasts the store's."""
    await _enqueue(engine, 2, sim=1)
    await _enqueue(engine, 2, sim=2)
    behind, ahead = Outbox(engine), Outbox(engine)
    with _node_clock(-30.0):
        held = await behind.claim(max_units=1, unit_rows=64, per_endpoint=8, lease_s=30)
    assert [job.simulation_id for unit in held for job in unit.jobs] == [1, 1]
    assert held[0].lease_until <= time.time()  # 30 s of lease, read on a clock 30 s behind
    with _node_clock(30.0):
        taken = await ahead.claim(max_units=10, unit_rows=64, per_endpoint=8, lease_s=EXPIRED)
    assert [job.simulation_id for unit in taken for job in unit.jobs] == [2, 2]  # not sim 1
    with _node_clock(-30.0):
        again = await behind.claim(max_units=10, unit_rows=64, per_endpoint=8, lease_s=30)
    assert [job.simulation_id for unit in again for job in unit.jobs] == [2, 2]
    assert {job.token for unit in again for job in unit.jobs}.isdisjoint(
        {job.token for unit in taken for job in unit.jobs})
