"""A run killed mid-run goes on from its snapshot, on SQLite and on PostgreSQL.

Two ``ridecast serve`` nodes share a store: one SQLite file (no bus: commands are sent to
the owner) or a PostgreSQL database with Redis between the nodes (commands through either
node). A run starts on node A at 40 times real time with a snapshot every 120 simulated
seconds; bookings are sent through both nodes; once a snapshot is stored, A is killed with
SIGKILL, bookings go on through B (retried while it takes over: a 503 is not an
acknowledgement), and the run finishes on B.

B's takeover starts from the snapshot: it replays only the journal entries after it and
drops only the events published after it (from its log line). The whole logged stream is
exactly the run rebuilt from its spec and journal offline: no event twice, none missing;
and every acknowledged booking is in the journal exactly once.
"""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from ridecast.simulator.core.commands import apply
from ridecast.simulator.core.spec import RunSpec
from ridecast.simulator.hosting.journal import JournalEntry, JournalStore
from ridecast.simulator.hosting.lease import LeaseStore
from ridecast.store.engine import create_engine
from ridecast.store.tables import simulator_snapshots
from tests.conftest import (
    CrossNodeServer,
    Server,
    User,
    drop_cluster_pair,
    launch_cluster_pair,
    launch_servers,
    spawn_server,
)
from tests.waiting import eventually

SETTINGS = {"seed": 8, "vehicles": 8, "bookings_per_hour": 240, "duration_s": 900,
            "start_ts": "2024-05-06T08:00:00+00:00", "network": "straight",
            "vehicle_speed_kmh": 90, "max_wait_s": 300,
            "area": {"lat": 57.705, "lon": 11.963, "radius_m": 3000}, "speed": 40}
"""About 30 s of wall time: demand goes on well past the kill (after the first snapshot, at
120 simulated s) and B's takeover and bookings; fast vehicles and a short longest wait end
the trips soon after the demand. No claim depends on the fleet."""
TRIP = {"pickup_lat": 57.70, "pickup_lon": 11.96, "dropoff_lat": 57.71, "dropoff_lon": 11.97,
        "passengers": 1}
ENV = {"RIDECAST_SIMULATOR_LEASE_S": "2", "RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S": "2",
       "RIDECAST_SIMULATOR_SNAPSHOT_EVERY_S": "120", "RIDECAST_LOG_LEVEL": "info"}
STAMPED = ("server_ts", "event_id")
TAKEN = re.compile(r"taken over \(run \w+, from its snapshot at (\d+) s, (\d+) journal "
                   r"entries to replay, (\d+) events already published, (\d+) of them after "
                   r"that point\)")


def _events(server: Server, user: User, sim: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after: str | None = None
    with server.client(user) as http:
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if after is not None:
                params["after"] = after
            page = http.get(f"/api/v2/simulation/{sim}/events", params=params).json()
            out += page["objects"]
            if len(page["objects"]) < 1000:
                return out
            after = page["objects"][-1]["event_id"]


def _status(server: Server, user: User, sim: int) -> dict[str, Any]:
    with server.client(user) as http:
        body: dict[str, Any] = http.get(f"/api/v2/simulation/{sim}/simulator").json()
        return body


def _book(server: Server, user: User, sim: int) -> int | None:
    """A booking through ``server``: its id once acknowledged, None when refused with a
    503 (the run being taken over)."""
    with server.client(user) as http:
        try:
            answer = http.post(f"/api/v2/simulation/{sim}/bookings", json=TRIP)
        except httpx.HTTPError:
            return None
    if answer.status_code == 201:
        return int(answer.json()["booking"]["id"])
    assert answer.status_code == 503, answer.text
    return None


async def _stored(url: str, sim: int) -> tuple[int, RunSpec, list[JournalEntry]]:
    """Snapshots stored for the simulation, and its run's spec and journal."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            snapshots = int((await conn.execute(
                select(func.count()).select_from(simulator_snapshots)
                .where(simulator_snapshots.c.simulation_id == sim))).scalar() or 0)
        record = await LeaseStore(engine).read(sim)
        assert record is not None and record.spec_json is not None
        spec = RunSpec.from_json(record.spec_json)
        return snapshots, spec, await JournalStore(engine).read(spec.run_id)
    finally:
        await engine.dispose()


def _rebuilt(spec: RunSpec, sim: int, entries: list[JournalEntry]) -> list[dict[str, Any]]:
    """The run's whole stream, rebuilt offline from its spec and journal."""
    engine = spec.engine(sim)
    events: list[dict[str, Any]] = []
    for entry in entries:
        events += engine.advance(entry.sim_t)
        events += apply(engine, entry.command)[1]
    while not engine.finished:
        events += engine.advance(engine.now + 60.0)
    return list(orjson.loads(orjson.dumps(events)))


@pytest.fixture(params=["sqlite", "postgresql"])
def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "postgresql":
        pair = launch_cluster_pair(tmp_path, ENV)
        yield pair, pair.other, True
        drop_cluster_pair(pair)
        return
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    first, second = launch_servers(  # their start-ups overlap
        lambda: spawn_server(tmp_path / "a", ENV, database_url=url),
        lambda: spawn_server(tmp_path / "b", ENV, database_url=url))
    yield first, second, False
    first.stop()
    second.stop()


def test_a_killed_run_goes_on_from_its_snapshot(nodes: Any) -> None:
    a, b, bus = nodes
    assert isinstance(a, Server) and isinstance(b, Server)
    user = a.create_user()
    sim = a.create_simulation(user, {"simulator": SETTINGS})
    with a.client(user) as http:
        assert http.post(f"/api/v2/simulation/{sim}/simulator/start").status_code == 200
    acknowledged: list[int] = []
    # Through both nodes when they share a bus (B forwards to the owner), else the owner.
    senders = [a, b] if bus else [a]

    def snapshot_stored_and_four_booked() -> bool:
        if asyncio.run(_stored(a.database_url, sim))[0] > 0 and len(acknowledged) >= 4:
            return True
        booked = _book(senders[len(acknowledged) % len(senders)], user, sim)
        if booked is not None:
            acknowledged.append(booked)
        return False

    eventually(snapshot_stored_and_four_booked, timeout=60, step=0.3,
               what="a stored snapshot and four acknowledged bookings")
    a.process.send_signal(signal.SIGKILL)  # A alone (a pair's stop() stops both)
    a.process.wait(30)
    # Through B while it takes the run over and after.
    for _ in range(4):
        acknowledged.append(eventually(lambda: _book(b, user, sim), timeout=60, step=0.2,
                                       what="B taking the run over"))
    eventually(lambda: _status(b, user, sim)["status"] == "finished", timeout=180)
    taken = TAKEN.search(b.logs())
    assert taken is not None, b.logs()[-3000:]
    _snapshots, spec, entries = asyncio.run(_stored(b.database_url, sim))
    at_s, replayed, published, dropped = (int(g) for g in taken.groups())
    # Only what came after the snapshot is replayed: the journal's tail, and the events
    # published after its point (produced again, and dropped).
    assert at_s > 0 and replayed < len(entries)
    assert dropped < published
    # Every acknowledged booking exactly once in the journal, and nothing else.
    assert len(entries) == len(acknowledged) == len(set(acknowledged))
    assert all(entry.command.name == "create_booking" for entry in entries)
    logged = [{k: v for k, v in event.items() if k not in STAMPED}
              for event in _events(b, user, sim)]
    rebuilt = _rebuilt(spec, sim, entries)
    for k, (got, want) in enumerate(zip(logged, rebuilt, strict=False)):
        assert got == want, f"event {k} differs:\n{got}\n{want}"
    assert len(logged) == len(rebuilt)
    assert isinstance(a, CrossNodeServer) == bus
