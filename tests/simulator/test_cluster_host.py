"""Two nodes in one event loop: two ``ClusterHost``s on one real bus and one real database.

Node A starts a run; node B forwards commands to it over the bus and reads its status from
the store. A node cut off from the bus cannot answer (503 with Retry-After); once its lease
expires the run reads as interrupted, B can start it again, and A stops its own runner.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ridecast.bus import BusMessage, MemoryBus, SimulationChanged, SimulatorCommand
from ridecast.errors import RidecastError, ServiceUnavailable
from ridecast.simulator.core.commands import Command
from ridecast.simulator.hosting.cluster_host import ClusterHost
from ridecast.simulator.hosting.lease import LeaseStore
from ridecast.simulator.hosting.manager import SimulatorManager
from ridecast.store.engine import create_engine, upgrade
from tests.waiting import eventually_async

SIM = 5
DATA = {"simulator": {"seed": 3, "vehicles": 3, "speed": 1, "bookings_per_hour": 0,
                      "duration_s": 3600, "vehicle_break_probability": 0,
                      "no_show_probability": 0,
                      "area": {"lat": 52.52, "lon": 13.405, "radius_m": 300}}}
TRIP = {"pickup_lat": 52.52, "pickup_lon": 13.405, "dropoff_lat": 52.525, "dropoff_lon": 13.42,
        "passengers": 1, "max_wait_s": None}
LEASE_S = 30.0


class Clock:
    """Shared by both nodes' lease stores, moved by hand so that leases expire at once."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class Sink:
    """Where a node's simulator events go (the server wires the ingest here)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def __call__(self, simulation_id: int, events: list[dict[str, Any]]) -> None:
        self.events.extend(events)


class Node:
    def __init__(self, name: str, host: ClusterHost, sink: Sink) -> None:
        self.name, self.host, self.sink = name, host, sink


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Node, Node, MemoryBus, Clock]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cluster.db'}"
    await upgrade(url)
    engine = create_engine(url)
    bus = MemoryBus()
    clock = Clock()
    nodes = []
    for name in "AB":
        sink = Sink()
        host = ClusterHost(SimulatorManager(sink), LeaseStore(engine, clock), bus,
                           lease_s=LEASE_S, forward_timeout_s=1.0, node_id=name)
        nodes.append(Node(name, host, sink))
    try:
        yield nodes[0], nodes[1], bus, clock
    finally:
        for node in nodes:
            await node.host.close()
        await engine.dispose()


async def test_commands_sent_to_b_run_on_a(
        cluster: tuple[Node, Node, MemoryBus, Clock]) -> None:
    """Start on A; a booking, pause, resume and stop sent to B run on A's engine, and B's
    status (A's snapshot) follows each change."""
    a, b, _bus, _clock = cluster
    assert (await a.host.start(SIM, DATA))["status"] == "running"
    assert (await b.host.status(SIM))["status"] == "running"
    booked = await b.host.operate(SIM, Command("create_booking", TRIP))
    assert booked["published"][0] == "bookings"
    assert "bookings" in [e["message_type"] for e in a.sink.events]
    assert b.sink.events == [] and SIM not in b.host.manager.runners
    assert (await b.host.pause(SIM))["status"] == "paused"
    assert (await b.host.status(SIM))["status"] == "paused"
    assert (await a.host.status(SIM))["status"] == "paused"
    assert (await b.host.resume(SIM))["status"] == "running"
    stopped = await b.host.stop(SIM)
    assert stopped["status"] == "stopped" and stopped["kpis"]["bookings"] == 1
    assert (await b.host.status(SIM))["status"] == "stopped"


async def test_owner_errors_reach_the_caller_unchanged(
        cluster: tuple[Node, Node, MemoryBus, Clock]) -> None:
    """The same bad command gives the same code, status and message on A and through B;
    a second start through B is the owner's 409."""
    a, b, _bus, _clock = cluster
    await a.host.start(SIM, DATA)
    errors = []
    for node in (a, b):
        with pytest.raises(RidecastError) as caught:
            await node.host.operate(SIM, Command("accept_offer", {"offer_id": 424242}))
        errors.append((caught.value.code, caught.value.http_status, caught.value.message))
    assert errors[0] == errors[1] and errors[0][1] == 404
    for node in (a, b):
        with pytest.raises(RidecastError) as caught:
            await node.host.start(SIM, DATA)
        assert (caught.value.code, caught.value.http_status) == ("invalid_state", 409)
        assert "already running" in caught.value.message


async def test_dead_owner_then_interrupted_then_restart(
        cluster: tuple[Node, Node, MemoryBus, Clock]) -> None:
    """A node cut off from the bus: B's command times out with a 503 and Retry-After; after
    the lease B reads interrupted (with A's last KPIs), starts the run itself, and A, on its
    next renewal, finds the run gone and stops its runner."""
    _a, b, _bus, _clock = cluster
    lonely = MemoryBus()  # node C shares the database but not the bus: it cannot answer
    sink = Sink()
    # A short lease that C never renews (its renewal loop is not started): it runs out by
    # the database's clock.
    c = ClusterHost(SimulatorManager(sink), b.host.leases, lonely, lease_s=2.0,
                    forward_timeout_s=1.0, node_id="C")
    try:
        await c.start(SIM, DATA)
        with pytest.raises(ServiceUnavailable) as caught:
            await b.host.pause(SIM)
        assert caught.value.code == "simulator_owner_unreachable"
        # The rest of the lease, and the takeover poll after it.
        assert caught.value.retry_after is not None and 1 <= caught.value.retry_after <= 3
        async def lapsed() -> bool:
            record = await b.host.leases.read(SIM)
            return record is not None and not record.live()

        await eventually_async(lapsed, timeout=30, what="the dead owner's lease lapsed")
        status = await b.host.status(SIM)
        assert status["status"] == "interrupted" and status["interrupted_status"] == "running"
        with pytest.raises(RidecastError) as refused:
            await b.host.pause(SIM)
        assert refused.value.message == "the simulator is interrupted, not running"
        assert (await b.host.start(SIM, DATA))["status"] == "running"
        assert SIM in b.host.manager.runners
        await c.renew()
        assert SIM not in c.manager.runners
        assert (await c.status(SIM))["status"] == "running"  # B's snapshot
    finally:
        await c.close()


async def test_retry_after_counts_the_lease_left_when_the_503_is_sent(
        cluster: tuple[Node, Node, MemoryBus, Clock]) -> None:
    """The owner does not answer: the forward waits its timeout (1 s here), during which the
    lease clock moves on 10 s; the Retry-After is what is left of the lease then, plus the
    takeover poll (30 - 10 + 1 = 21 s), not what was left before the wait (31 s)."""
    _a, b, bus, clock = cluster
    lonely = MemoryBus()  # node C shares the database but not the bus: it cannot answer
    c = ClusterHost(SimulatorManager(Sink()), b.host.leases, lonely, lease_s=LEASE_S,
                    forward_timeout_s=1.0, node_id="C")

    def ten_seconds_pass(messages: Sequence[BusMessage]) -> None:
        """The forwarded command is on the bus: B's wait for an answer begins."""
        if any(isinstance(m, SimulatorCommand) for m in messages):
            clock.t += 10

    unsubscribe = bus.subscribe(ten_seconds_pass)
    try:
        await c.start(SIM, DATA)
        with pytest.raises(ServiceUnavailable) as caught:
            await b.host.pause(SIM)
        assert caught.value.code == "simulator_owner_unreachable"
        assert caught.value.retry_after == 21
    finally:
        unsubscribe()
        await c.close()


async def test_one_node_behaves_as_before(
        cluster: tuple[Node, Node, MemoryBus, Clock]) -> None:
    """With one node: idle before a start, 409 for an operation before it, live status."""
    a, _b, _bus, _clock = cluster
    assert await a.host.status(SIM) == {"status": "idle", "sim_ts": None, "kpis": {}}
    with pytest.raises(RidecastError) as caught:
        await a.host.operate(SIM, Command("cancel_booking", {"booking_id": 1}))
    assert caught.value.code == "invalid_state"
    await a.host.start(SIM, DATA)
    await asyncio.sleep(0)
    assert (await a.host.status(SIM))["status"] == "running"


async def test_a_deleted_simulation_stops_its_run_on_the_owner(
        cluster: tuple[Node, Node, MemoryBus, Clock]) -> None:
    """SimulationChanged(deleted) on the bus: the owner stops the runner and drops the row."""
    a, b, bus, _clock = cluster
    await a.host.start(SIM, DATA)
    await bus.publish([SimulationChanged(SIM, org_id=1, owner_id=1, deleted=True)])
    async def forgotten() -> bool:  # the owner forgets the run in a task of its own
        return SIM not in a.host.manager.runners and await a.host.leases.read(SIM) is None

    await eventually_async(forgotten, timeout=10, step=0.01, what="the owner forgetting the run")
    assert SIM not in a.host.manager.runners
    assert await b.host.status(SIM) == {"status": "idle", "sim_ts": None, "kpis": {}}
