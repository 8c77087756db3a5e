"""The failing clock per endpoint URL in the store, and the URL-change rule end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from ridecast.cli.receiver import ReceiverThread, Reply
from ridecast.store.engine import create_engine, upgrade
from ridecast.webhooks.health import EndpointHealth
from tests.conftest import Server

from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for

DAY = 24 * 3600.0


async def _clock_story(url: str) -> None:
    await upgrade(url)
    engine = create_engine(url)
    try:
        health = EndpointHealth(engine, quiet_gap_s=600)
        other = EndpointHealth(engine, quiet_gap_s=600)  # a second worker, same store
        assert await health.failed(7, "http://a/", 0.0) == 0.0
        assert await other.failed(7, "http://a/", 300.0) == 0.0  # the streak goes on
        # A quiet day, then one failure: a new streak (it must not disable the endpoint).
        assert await health.failed(7, "http://a/", DAY) == DAY
        # The URL changed: the old clock is gone, the new URL starts its own.
        assert await other.failed(7, "http://b/", DAY + 10) == DAY + 10
        assert await health.failing_since(7) == ("http://b/", DAY + 10)
        await health.succeeded(7)
        assert await health.failing_since(7) is None
        assert await health.failed(7, "http://b/", DAY + 20) == DAY + 20
    finally:
        await engine.dispose()


def test_failing_clock_in_sqlite(tmp_path: Path) -> None:
    """Streaks start at the first failure, survive a second worker, restart after a quiet
    gap or a URL change, and end with a success."""
    asyncio.run(_clock_story(f"sqlite+aiosqlite:///{tmp_path / 'h.db'}"))


def test_failing_clock_in_postgres(pg_url: str) -> None:
    """The same story on PostgreSQL."""
    asyncio.run(_clock_story(pg_url))


async def _cleared_while_read(url: str) -> None:
    await upgrade(url)
    engine = create_engine(url)
    try:
        health = EndpointHealth(engine, quiet_gap_s=600)
        assert await health.failed(7, "http://a/", 0.0) == 0.0
        async with engine.connect() as other, engine.connect() as watcher:
            # Another worker's transaction holds the clock's row (as a success that ends the
            # streak does before it deletes it)...
            await other.execute(text("SELECT 1 FROM webhook_endpoints WHERE simulation_id = 7 "
                                     "FOR UPDATE"))
            failure = asyncio.create_task(health.failed(7, "http://a/", 100.0))
            # ...while this failure finds the row there and waits to lock it (the activity
            # view is read in a fresh transaction each time: it is a snapshot within one).
            waiting = 0
            for _ in range(500):
                waiting = (await watcher.execute(text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"))).scalar_one()
                await watcher.rollback()
                if waiting or failure.done():
                    break
                await asyncio.sleep(0.01)
            assert waiting and not failure.done()
            await other.execute(text("DELETE FROM webhook_endpoints WHERE simulation_id = 7"))
            await other.commit()
            # The clock was cleared under it: this failure starts a new streak.
            assert await failure == 100.0
        assert await health.failing_since(7) == ("http://a/", 100.0)
    finally:
        await engine.dispose()


def test_failure_while_another_worker_clears_the_clock(pg_url: str) -> None:
    """A success elsewhere deletes the clock between this failure's insert (which found it)
    and its locking read (which then finds nothing): the failure starts a new streak
    instead of raising."""
    asyncio.run(_cleared_while_read(pg_url))


def test_deliveries_queued_before_a_url_change_go_to_the_new_url(fast_server: Server) -> None:
    """The old URL fails; after a PATCH to a new URL the queued events arrive there, in order,
    and the endpoint's failing clock is cleared by the success."""
    old = Recorder(lambda req, n: Reply(503))
    new = Recorder()
    with ReceiverThread(old) as bad, ReceiverThread(new) as good:
        user = fast_server.create_user()
        types = {"messaging_webhook_message_types": ["vehicle_use"]}
        sim = fast_server.create_simulation(user, {"messaging_webhook_url": bad.url, **types})
        with fast_server.client(user) as http:
            ids = post_events(http, sim, [vehicle_use(i) for i in range(10)])
            wait_for(lambda: len(old.requests) >= 1)

            async def clock() -> tuple[str, float] | None:
                engine = create_engine(fast_server.database_url)
                try:
                    return await EndpointHealth(engine, quiet_gap_s=1).failing_since(sim)
                finally:
                    await engine.dispose()

            # The receiver sees the request before the worker records the failure.
            wait_for(lambda: asyncio.run(clock()) is not None)
            assert asyncio.run(clock())[0] == bad.url
            patched = http.patch(f"/api/v2/simulation/{sim}",
                                 json={"data": {"messaging_webhook_url": good.url, **types}})
            assert patched.status_code == 200
            wait_for(lambda: len(new.ids()) == 10)
            wait_for(lambda: all(d["status"] == "succeeded" for d in deliveries(http, sim)))
            log = deliveries(http, sim)
            assert asyncio.run(clock()) is None
    assert [r.headers["webhook-id"] for r in new.requests] == [f"msg_{i}" for i in ids]
    assert {r.headers["webhook-id"] for r in old.requests} == {f"msg_{ids[0]}"}
    assert {d["url"] for d in log} == {good.url}


@pytest.mark.parametrize("keys", [{}, {"messaging_webhook_message_types": []}])
def test_queued_deliveries_are_cancelled_when_the_webhook_is_removed(
    fast_server: Server, keys: dict[str, object]
) -> None:
    """A PATCH that removes the webhook settings cancels what was still queued (failed,
    with the reason, replayable)."""
    failing = Recorder(lambda req, n: Reply(500))
    with ReceiverThread(failing) as receiver:
        user = fast_server.create_user()
        sim = fast_server.create_simulation(user, {
            "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": ["vehicle_use"]})
        with fast_server.client(user) as http:
            post_events(http, sim, [vehicle_use(i) for i in range(3)])
            wait_for(lambda: len(failing.requests) >= 1)
            assert http.patch(f"/api/v2/simulation/{sim}", json={"data": keys}).is_success
            wait_for(lambda: all(d["status"] == "failed" for d in deliveries(http, sim)))
            log = deliveries(http, sim)
    assert all("no webhook settings" in d["last_error"] for d in log)
