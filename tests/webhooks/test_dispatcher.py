"""The dispatcher in process, on a real SQLite store and real loopback receivers: nothing it
claimed stays held in memory, and stopping it gives back what it did not send."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.bus.memory import MemoryBus
from ridecast.cli.receiver import Receiver, Reply, Request
from ridecast.config import Settings
from ridecast.errors import ServiceUnavailable
from ridecast.simulations import SimulationCatalog
from ridecast.store.accounts import AccountStore
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.outbox import outbox_sql
from ridecast.store.simulations import SimulationStore
from ridecast.store.tables import events, webhook_deliveries
from ridecast.webhooks.bodies import Bodies
from ridecast.webhooks.claimer import Claimer
from ridecast.webhooks.deliverylog import DeliveryLog
from ridecast.webhooks.dispatcher import Dispatcher
from ridecast.webhooks.health import EndpointHealth
from ridecast.webhooks.jobs import Unit
from ridecast.webhooks.policy import DeliveryPolicy
from ridecast.webhooks.recorder import Recorder
from ridecast.webhooks.sender import Attempt, Sender
from ridecast.webhooks.units import UnitRunner
from tests.waiting import eventually_async

from .test_outbox import Outbox

POLICY = DeliveryPolicy.from_settings(Settings())


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'd.db'}"
    await upgrade(url)
    eng = create_engine(url)
    yield eng
    await eng.dispose()


async def _setup(engine: AsyncEngine, url: str, count: int, *, ordered: bool = True,
                 per_endpoint: int = 8, lease_s: float = 5, poll_interval_s: float = 1,
                 claimer: type[Claimer] = Claimer, sender_type: type[Sender] = Sender,
                 clock: Callable[[], float] = time.time,
                 ) -> tuple[Dispatcher, Sender, int]:
    principal, _key = await AccountStore(engine).create_user("u", "o")
    store = SimulationStore(engine)
    sim = (await store.create(principal, "s", {
        "messaging_webhook_url": url, "messaging_webhook_message_types": ["vehicle_use"]},
        None)).id
    now = time.time()
    async with engine.begin() as conn:
        for i in range(count):
            event_id = (await conn.execute(insert(events).values(
                simulation_id=sim, message_type="vehicle_use", created_at=now,
                body=b'{"simulation_id":%d,"i":%d}' % (sim, i)))).inserted_primary_key[0]
            await conn.execute(insert(webhook_deliveries).values(
                event_id=event_id, simulation_id=sim, message_type="vehicle_use", url=url,
                status="pending", attempt_count=0, next_attempt_at=now, created_at=now,
                updated_at=now, ordered=ordered))
    settings = Settings(webhook_allow_private=True, webhook_timeout_s=0.5,
                        webhook_lease_s=lease_s, webhook_retry_schedule_s=[0.1],
                        webhook_concurrency_per_endpoint=per_endpoint,
                        webhook_poll_interval_s=poll_interval_s)
    policy = DeliveryPolicy.from_settings(settings)
    sender = sender_type(timeout_s=0.5, connect_timeout_s=0.5, allow_private=True)

    async def disable(_sim: int, _at: float, _reason: str) -> None:
        return None

    # Wired as app.py wires them.
    sql = outbox_sql(engine.dialect.name)
    recorder = Recorder(engine, sql)
    bus = MemoryBus()
    dispatcher = Dispatcher(
        policy, claimer=claimer(engine, sql, recorder), recorder=recorder,
        deliveries=DeliveryLog(engine, sql), sender=sender,
        simulations=SimulationCatalog(store, bus),
        health=EndpointHealth(engine, quiet_gap_s=policy.quiet_gap_s),
        bodies=Bodies(policy.body_cache_bytes), bus=bus, disable=disable, clock=clock)
    return dispatcher, sender, sim


async def _statuses(engine: AsyncEngine) -> list[tuple[str, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(webhook_deliveries.c.status,
                                         webhook_deliveries.c.claim_token))
        return [(r[0], r[1]) for r in rows]


async def test_finished_units_leave_nothing_held(engine: AsyncEngine) -> None:
    """After 150 deliveries succeed, no unit task is left and no delivery is held in memory."""
    receiver = Receiver(lambda _r: Reply(204))
    await receiver.start()
    dispatcher, sender, _sim = await _setup(engine, receiver.url, 150)
    await _deliver_all(engine, dispatcher, sender, receiver)
    assert all(token is None for _s, token in await _statuses(engine))


async def test_an_unordered_backlog_keeps_its_slot_in_one_unit(
        engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """More unordered deliveries than a chunk, one slot: the unit asks for more rows as it
    runs out and its task sends them all; no second unit waits for a claim in between.
    (The receiver takes 2 ms a request: the rows left when the unit asks last 250 ms, far
    longer than the claim that brings more.)"""
    received: list[int] = []

    async def record(request: Request) -> Reply:
        await asyncio.sleep(0.002)
        received.append(int(request.headers["webhook-id"].removeprefix("msg_")))
        return Reply(204)

    receiver = Receiver(record)
    await receiver.start()
    count = POLICY.chunk_rows * 2 + 100
    dispatcher, sender, _sim = await _setup(engine, receiver.url, count, ordered=False,
                                            per_endpoint=1)
    started: list[int] = []
    start_unit = UnitRunner.start

    async def counted(self: UnitRunner, unit: Unit) -> None:
        started.append(len(unit.jobs))
        await start_unit(self, unit)

    monkeypatch.setattr(UnitRunner, "start", counted)
    await _deliver_all(engine, dispatcher, sender, receiver)
    assert started == [POLICY.chunk_rows]
    assert sorted(received) == received and len(received) == count


async def _deliver_all(engine: AsyncEngine, dispatcher: Dispatcher, sender: Sender,
                       receiver: Receiver) -> None:
    """Run the dispatcher until every delivery succeeded and it holds nothing; then stop
    it, its sender and the receiver."""
    dispatcher.start()
    try:
        async def done() -> bool:
            return {s for s, _t in await _statuses(engine)} == {"succeeded"}

        await eventually_async(done)
        await eventually_async(lambda: _idle(dispatcher))
    finally:
        await dispatcher.close()
        await sender.close()
        await receiver.close()


async def _idle(dispatcher: Dispatcher) -> bool:
    return dispatcher.in_memory == 0 and dispatcher.units_running == 0


async def test_retention_removes_finished_deliveries_by_the_injected_clock(
        engine: AsyncEngine) -> None:
    """Finished deliveries stay while the dispatcher's clock is within the retention and go
    once it has passed it: a fake clock stands for the days a real one would take."""
    async def ok(_request: Request) -> Reply:
        return Reply(204)

    receiver = Receiver(ok)
    await receiver.start()
    clock = [time.time()]
    dispatcher, sender, _sim = await _setup(engine, receiver.url, 3, clock=lambda: clock[0])
    await _deliver_all(engine, dispatcher, sender, receiver)
    assert await dispatcher.apply_retention() == 0
    clock[0] += POLICY.retention_s + 60
    assert await dispatcher.apply_retention() == 3
    assert await _statuses(engine) == []


async def test_close_gives_back_what_was_not_sent(engine: AsyncEngine) -> None:
    """Stopped while its receiver stalls, the dispatcher hands every claimed delivery back
    (pending, no claim token), so a restart need not wait out the lease."""
    started = asyncio.Event()

    async def stall(_request: Request) -> Reply:
        started.set()
        await asyncio.sleep(30)
        return Reply(204)

    receiver = Receiver(stall)
    await receiver.start()
    dispatcher, sender, _sim = await _setup(engine, receiver.url, 5)
    dispatcher.start()
    try:
        await asyncio.wait_for(started.wait(), 10)
    finally:
        await dispatcher.close()
        await sender.close()
        await receiver.close()
    assert dispatcher.in_memory == 0 and dispatcher.units_running == 0
    assert sorted(await _statuses(engine)) == [("pending", None)] * 5


async def _lease(engine: AsyncEngine) -> tuple[str, str | None, float | None]:
    """(status, claim token, lease end) of the only delivery."""
    async with engine.connect() as conn:
        row = (await conn.execute(select(webhook_deliveries.c.status,
                                         webhook_deliveries.c.claim_token,
                                         webhook_deliveries.c.lease_until))).one()
        return row[0], row[1], row[2]


class _HeldWrites(Claimer):
    """A claimer whose transactions that write results wait for ``writes`` (a cycle that is
    slow to commit: a loaded machine, a claim failing and tried again)."""

    writes = asyncio.Event()
    leases: list[float] = []

    async def claim(self, **kwargs: Any) -> list[Unit]:
        if kwargs.get("record"):
            await self.writes.wait()
        units = await super().claim(**kwargs)
        self.leases += [unit.lease_until for unit in units]
        return units


class _HeldWritesFirstKeepFails(_HeldWrites):
    """The same, and the first renewal of a lease fails (a store outage, or the worker's own
    transaction ended by the server)."""

    failed = False

    async def keep(self, token: str, lease_until: float) -> set[int]:
        if not _HeldWritesFirstKeepFails.failed:
            _HeldWritesFirstKeepFails.failed = True
            raise ServiceUnavailable("the store did not answer")
        return await super().keep(token, lease_until)


async def test_a_result_waiting_to_be_written_keeps_its_lease(engine: AsyncEngine) -> None:
    """A delivery answered 2xx whose result waits to be written past its first lease: its
    unit renews the lease, so another worker cannot take it and send it again; once the
    write goes through, it is succeeded, sent once."""
    await _result_keeps_its_lease(engine, _HeldWrites)


async def test_a_result_waiting_to_be_written_keeps_its_lease_through_a_failed_renewal(
        engine: AsyncEngine) -> None:
    """The same when a renewal fails: the unit tries again while the lease lasts instead of
    letting it run out (another worker would then send the answered delivery again)."""
    _HeldWritesFirstKeepFails.failed = False
    await _result_keeps_its_lease(engine, _HeldWritesFirstKeepFails)
    assert _HeldWritesFirstKeepFails.failed


async def _result_keeps_its_lease(engine: AsyncEngine, claimer: type[_HeldWrites]) -> None:
    received: list[str] = []

    async def record(request: Request) -> Reply:
        received.append(request.headers["webhook-id"])
        return Reply(204)

    receiver = Receiver(record)
    await receiver.start()
    _HeldWrites.writes = asyncio.Event()
    _HeldWrites.leases = []
    dispatcher, sender, _sim = await _setup(engine, receiver.url, 1, lease_s=1,
                                            poll_interval_s=30, claimer=claimer)
    other = Outbox(engine)
    dispatcher.start()
    try:
        await eventually_async(lambda: len(received) == 1)
        (first_lease,) = _HeldWrites.leases

        async def renewed_past_the_first() -> bool:
            status, _token, lease = await _lease(engine)
            return (time.time() > first_lease and status == "delivering"
                    and lease is not None and lease > time.time())

        await eventually_async(renewed_past_the_first)
        assert await other.claim(max_units=10, unit_rows=64, per_endpoint=8, lease_s=30) == []
        _HeldWrites.writes.set()
        await eventually_async(lambda: _lease_is(engine, "succeeded"))
        await eventually_async(lambda: _idle(dispatcher))
    finally:
        _HeldWrites.writes.set()
        await dispatcher.close()
        await sender.close()
        await receiver.close()
    assert received == [received[0]]


class _StalledSender(Sender):
    """A sender that stops (a frozen worker) after its unit checked the lease, before the
    request is written, until ``go`` is set."""

    entered = asyncio.Event()
    go = asyncio.Event()

    async def send(self, *args: Any, **kwargs: Any) -> Attempt:
        self.entered.set()
        await self.go.wait()
        return await super().send(*args, **kwargs)


async def test_a_send_whose_lease_ran_out_before_the_write_is_not_written(
        engine: AsyncEngine) -> None:
    """A worker stopped between its lease check and the write of a request, whose lease ran
    out meanwhile and whose lane another worker took, does not write the request when it
    resumes: it finds the lane taken, drops it unsent, and the other worker's claim stands."""
    received: list[str] = []

    async def record(request: Request) -> Reply:
        received.append(request.headers["webhook-id"])
        return Reply(204)

    receiver = Receiver(record)
    await receiver.start()
    _StalledSender.entered, _StalledSender.go = asyncio.Event(), asyncio.Event()
    dispatcher, sender, _sim = await _setup(engine, receiver.url, 1, lease_s=1,
                                            poll_interval_s=30, sender_type=_StalledSender)
    other = Outbox(engine)
    dispatcher.start()
    try:
        await asyncio.wait_for(_StalledSender.entered.wait(), 20)
        _status, _token, first_lease = await _lease(engine)
        assert first_lease is not None
        # Another worker takes the row once its lease has lapsed by the store's clock.
        (taken,) = await eventually_async(
            lambda: other.claim(max_units=10, unit_rows=64, per_endpoint=8, lease_s=30),
            what="the lapsed lease claimed by another worker")
        _StalledSender.go.set()
        await eventually_async(lambda: _idle(dispatcher))
        assert received == []
        status, token, lease = await _lease(engine)
        assert (status, token) == ("delivering", taken.token)
        assert lease is not None and taken.lease_until <= lease < taken.lease_until + 1
    finally:
        _StalledSender.go.set()
        await dispatcher.close()
        await sender.close()
        await receiver.close()


async def _lease_is(engine: AsyncEngine, status: str) -> bool:
    return (await _lease(engine))[0] == status


class _CrashingSender(Sender):
    """A sender with a defect: its first send raises instead of returning an attempt."""

    crashed_at: float | None = None

    async def send(self, *args: Any, **kwargs: Any) -> Attempt:
        if _CrashingSender.crashed_at is None:
            _CrashingSender.crashed_at = time.time()
            raise RuntimeError("a defect in the sender")
        return await super().send(*args, **kwargs)


async def test_a_crashed_attempt_is_a_recorded_failure_retried_on_the_schedule(
        engine: AsyncEngine) -> None:
    """An attempt that raises is recorded as a failed attempt of class ``other`` and retried
    on the schedule (0.1 s here), never given back as due at once (a delivery that crashed
    every time would spin)."""
    received: list[float] = []

    async def record(_request: Request) -> Reply:
        received.append(time.time())
        return Reply(204)

    receiver = Receiver(record)
    await receiver.start()
    _CrashingSender.crashed_at = None
    dispatcher, sender, sim = await _setup(engine, receiver.url, 1, poll_interval_s=30,
                                           sender_type=_CrashingSender)
    dispatcher.start()
    try:
        await eventually_async(lambda: _lease_is(engine, "succeeded"))
    finally:
        await dispatcher.close()
        await sender.close()
        await receiver.close()
    (delivery,) = (await Outbox(engine).list(sim, status=None, message_type=None,
                                             limit=10))[0]
    assert delivery["attempt_count"] == 2
    failed, ok = delivery["attempts"]
    assert failed["error_class"] == "other"
    assert "RuntimeError: a defect in the sender" in failed["error"]
    assert ok["error_class"] is None and ok["status_code"] == 204
    crashed_at = _CrashingSender.crashed_at
    assert crashed_at is not None and len(received) == 1
    assert received[0] - crashed_at >= 0.1 * 0.8  # the schedule's delay, jitter included
