"""A simulator run outlives its node: the rolling restart and the crash of its owner.

Two ``ridecast serve`` nodes (``RIDECAST_WEBHOOK_WORKERS=false``) and two ``ridecast worker``
processes, which deliver the webhooks, on PostgreSQL and Redis run a seeded run with a fixed
``start_ts`` at 15 times real time. In the first test the nodes and the workers are restarted
one by one with SIGTERM, as the rolling-upgrade procedure of docs/deployment.md says; in the
second the owner is killed with SIGKILL (and one worker restarted with SIGTERM). Either way
the run's stream must be exactly the stream the same run publishes uninterrupted on one
embedded process (types, order, data, simulated times; ``server_ts`` aside), the run
finishes, and SDK subscribers given both nodes' URLs
(failing over and resuming with ``since=`` when their node goes) see every event once, in
order; every event reaches the webhook receiver. A restarted node comes back on the same
address, as in a rolling upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ridecast.cli.receiver import ReceiverThread
from ridecast.client import AsyncClient
from ridecast.events import ALL_TYPES
from tests.conftest import (
    REDIS_URL,
    Server,
    User,
    launch_server,
    launch_servers,
    redis_answers,
    service_missing,
    spawn_server,
)
from tests.waiting import eventually
from tests.webhooks.helpers import Recorder, start_worker, worker_running

SETTINGS = {"seed": 21, "vehicles": 6, "bookings_per_hour": 300, "duration_s": 480,
            "start_ts": "2024-05-06T08:00:00+00:00", "network": "straight",
            "area": {"lat": 57.705, "lon": 11.963, "radius_m": 3000},
            "vehicle_break_probability": 0.3, "break_duration_s": 120}
FAST = {"simulator": {**SETTINGS, "speed": 15}}
"""About 100 s of wall time (the run goes on to about 08:25 simulated): long enough that, on
a loaded machine, the run is still running when its last owner is signalled after the two
worker and node restarts before it (at 30x it could finish first). The speed changes no
event."""
FASTER = {"simulator": {**SETTINGS, "speed": 30}}
"""For one restart (one worker, then the owner): half of ``FAST``'s wall time, still several
times what a worker restart and the signal take on a loaded machine."""
REFERENCE = {"simulator": {**SETTINGS, "speed": "max"}}
ENV = {"RIDECAST_SIMULATOR_LEASE_S": "3", "RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S": "2",
       # A delivery a stopped node had claimed, or that failed as it stopped, is retried soon.
       "RIDECAST_WEBHOOK_LEASE_S": "2", "RIDECAST_WEBHOOK_TIMEOUT_S": "1",
       "RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]"}
STAMPED = ("server_ts", "event_id")


def _produced(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in STAMPED}


def _events(server: Server, user: User, sim: int) -> list[dict[str, Any]]:
    """The simulation's whole log, in order, with event ids."""
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


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The run uninterrupted on one embedded process (SQLite, in-process bus)."""
    server = launch_server(tmp_path_factory.mktemp("embedded"))
    try:
        user = server.create_user()
        sim = server.create_simulation(user, REFERENCE)
        with server.client(user) as http:
            assert http.post(f"/api/v2/simulation/{sim}/simulator/start").status_code == 200
        eventually(lambda: _status(server, user, sim)["status"] == "finished", timeout=120)
        return [_produced(e) for e in _events(server, user, sim)]
    finally:
        server.stop()


class Subscriber(threading.Thread):
    """An SDK client given both nodes' URLs (``AsyncClient([first, second])``), streaming the
    simulation's raw frames: when its node goes it fails over to the other and resumes with
    ``since=`` (the SDK's own doing)."""

    def __init__(self, urls: list[str], user: User, simulation_id: int) -> None:
        super().__init__(daemon=True)
        self.urls = urls
        self.user = user
        self.simulation_id = simulation_id
        self.frames: list[dict[str, Any]] = []
        self.statuses: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._running = threading.Event()

    @property
    def connected(self) -> bool:
        return "connected" in self.statuses

    def run(self) -> None:
        asyncio.run(self._follow())

    def stop(self) -> None:
        """End the stream and the thread: a stream left open would reconnect (with the
        SDK's jittered back-off) to nodes that are gone, for the rest of the session."""
        self._running.wait(10)
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self.join(10)
        assert not self.is_alive(), "the subscriber did not stop"

    async def _follow(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._running.set()
        with contextlib.suppress(asyncio.CancelledError):
            async with AsyncClient(self.urls, user=self.user.name,
                                   key=self.user.key) as client:
                # From the log's start: whatever the run publishes before this stream is
                # subscribed on its node is replayed, not missed.
                stream = client.stream(self.simulation_id, since="0",
                                       on_status=lambda s: self.statuses.append(s.kind))
                async with stream:
                    async for frame in stream.frames():
                        self.frames.append(json.loads(frame.raw))


def _owner(status: dict[str, Any]) -> str | None:
    owner = status.get("owner_node")
    return str(owner) if owner is not None else None


def _restart_worker(workers: list[subprocess.Popen[bytes]], k: int, database_url: str,
                    env: dict[str, str], log: Path) -> None:
    """Stop worker ``k`` with SIGTERM, wait for it to exit cleanly, start it again and wait
    until it runs: one worker at a time, as the rolling-upgrade procedure says."""
    workers[k].send_signal(signal.SIGTERM)
    assert workers[k].wait(20) == 0
    workers[k] = start_worker(database_url, env, log)
    eventually(lambda: worker_running(log, starts=2), timeout=60)


def _scenario(reference: list[dict[str, Any]], tmp_path: Path, pg_url: str, sig: int,
              restarts: int, run: dict[str, Any]) -> list[float]:
    """Start on node 0, with two workers delivering the webhooks; ``restarts`` times restart
    a worker with SIGTERM (each in turn), then stop the run's owner with ``sig`` (the other
    node takes it over) and start the node again on the same address; check the stream and
    the webhooks; the seconds from each signal until the new owner had caught up."""
    assert len(reference) > 500
    if not redis_answers():
        service_missing(f"no Redis at {REDIS_URL}")
    env = {**ENV, "RIDECAST_BUS_URL": REDIS_URL,
           "RIDECAST_BUS_PREFIX": f"test-{uuid.uuid4().hex[:12]}"}
    started_nodes: list[Server] = []
    worker_logs = [tmp_path / f"worker{k}.log" for k in range(2)]
    worker_env = dict(env)
    workers = [start_worker(pg_url, worker_env, log) for log in worker_logs]
    env = {**env, "RIDECAST_WEBHOOK_WORKERS": "false"}  # the nodes: the workers deliver

    def spawn(port: int | None = None) -> Server:
        folder = tmp_path / f"node{len(started_nodes)}"
        folder.mkdir()
        node = spawn_server(folder, env, database_url=pg_url, port=port)
        started_nodes.append(node)
        return node

    def launch(port: int | None = None) -> Server:
        (node,) = launch_servers(lambda: spawn(port))
        return node

    recorder = Recorder()
    receiver = ReceiverThread(recorder).start()
    subscribers: list[Subscriber] = []
    try:
        owner, other = launch_servers(spawn, spawn)  # their start-ups overlap
        user = owner.create_user()
        sim = owner.create_simulation(user, {
            **run, "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": sorted(ALL_TYPES)})
        subscribers += [Subscriber([owner.base_url, other.base_url], user, sim),
                        Subscriber([other.base_url, owner.base_url], user, sim)]
        for subscriber in subscribers:
            subscriber.start()
        eventually(lambda: all(s.connected for s in subscribers), timeout=120)
        eventually(lambda: all(worker_running(log, starts=1) for log in worker_logs), timeout=60)
        with owner.client(user) as http:
            started = http.post(f"/api/v2/simulation/{sim}/simulator/start")
            assert started.status_code == 200, started.text
        owners = [_owner(_status(other, user, sim))]
        takeovers: list[float] = []
        for k in range(restarts):
            eventually(lambda node=other: _status(node, user, sim)["kpis"].get("bookings", 0) >= 3,
                       timeout=120)
            _restart_worker(workers, k % 2, pg_url, worker_env, worker_logs[k % 2])
            print(f"worker {k % 2} restarted; the run is "
                  f"{_status(other, user, sim)['status']} at {len(recorder.requests)} webhooks")
            seconds, new_owner = _hand_over(owner, other, user, sim, sig)
            owners.append(new_owner)
            takeovers.append(seconds)
            owner.stop()
            owner, other = other, launch(owner.port)  # the new version, same address
        eventually(lambda: _status(other, user, sim)["status"] == "finished", timeout=120)
        logged = _events(other, user, sim)
        got = [_produced(e) for e in logged]
        for k, (a, b) in enumerate(zip(got, reference, strict=False)):
            assert a == b, f"event {k} differs:\n{a}\n{b}"
        assert len(got) == len(reference)
        # Each SDK subscriber saw every event once, in order, across its failovers.
        ids = [int(e["event_id"]) for e in logged]
        for subscriber in subscribers:
            eventually(lambda s=subscriber: len(s.frames) >= len(logged), timeout=60)
            subscriber.stop()
            assert [int(f["event_id"]) for f in subscriber.frames] == ids
            assert [_produced(f) for f in subscriber.frames] == reference
        assert sum(s.statuses.count("connected") for s in subscribers) >= 3
        # Every event reached the webhook receiver (at least once: dedupe on webhook-id).
        wanted = {f"msg_{i}" for i in ids}
        try:
            eventually(lambda: recorder.ids() >= wanted, timeout=60)
        finally:
            missing = sorted(wanted - recorder.ids())
            arrivals = len(recorder.requests)
            print(f"webhooks: {len(wanted) - len(missing)} of {len(wanted)} arrived; "
                  f"missing {missing[:5]}...; {arrivals - len(recorder.ids())} duplicates "
                  f"in {arrivals} requests")
        assert recorder.ids() == wanted
        assert len(set(owners)) == restarts + 1, owners
        assert _status(owner, user, sim)["status"] == "finished"
        return takeovers
    finally:
        for subscriber in subscribers:
            if subscriber.is_alive():
                subscriber.stop()
        for node in started_nodes:
            node.stop()
        for worker in workers:
            worker.terminate()
            worker.wait(20)
        receiver.stop()
        import redis

        redis.Redis.from_url(REDIS_URL).delete(f"{env['RIDECAST_BUS_PREFIX']}:bus")


def _hand_over(owner: Server, other: Server, user: User, sim: int,
               sig: int) -> tuple[float, str]:
    """Signal the owner; until ``other`` owns the run and has caught up, its status says
    who owns the run or that it is being taken over (never interrupted). The seconds from
    the signal to caught up, and the new owner's id."""
    status = _status(other, user, sim)
    assert status["status"] == "running", f"the run was {status['status']} before the signal"
    before = _owner(status)
    signalled = time.monotonic()
    owner.process.send_signal(sig)
    seen: list[dict[str, Any]] = []

    told: list[float] = []

    def taken() -> bool:
        status = _status(other, user, sim)
        seen.append(status)
        if not told and _owner(status) != before:  # pending, or already the new owner
            told.append(time.monotonic() - signalled)
        assert status["status"] in ("running", "finished"), status
        if seen[:-1] and seen[-2].get("sim_ts") and status.get("sim_ts"):
            # The clock and the KPIs never go back, the takeover's replay included.
            assert status["sim_ts"] >= seen[-2]["sim_ts"], (seen[-2]["sim_ts"], status)
            assert status["kpis"].get("events", 0) >= seen[-2]["kpis"].get("events", 0)
        assert (_owner(status) is not None) != (status.get("takeover") == "pending"), (
            {k: v for k, v in status.items() if k not in ("kpis", "settings")}, len(seen),
            time.monotonic() - signalled)
        return _owner(status) not in (None, before) and status.get("takeover") is None

    eventually(taken, timeout=120)
    caught_up = time.monotonic() - signalled
    new_owner = _owner(seen[-1])
    assert new_owner is not None
    print(f"signal {sig}: the other node told of it after {told[0]:.2f} s, the new owner "
          f"had caught up after {caught_up:.2f} s")
    return caught_up, new_owner


def test_a_rolling_restart_changes_nothing_in_the_run(
        reference: list[dict[str, Any]], tmp_path: Path, pg_url: str) -> None:
    """SIGTERM a worker and the owner (the other node takes over at once), start their
    replacements, then the same with the other worker and the new owner: the run's stream
    is the uninterrupted run's, the run finishes, a following subscriber sees no gap and no
    duplicate, every webhook arrives."""
    takeovers = _scenario(reference, tmp_path, pg_url, signal.SIGTERM, restarts=2, run=FAST)
    print(f"SIGTERM takeovers caught up after {[round(t, 2) for t in takeovers]} s")


def test_a_killed_owner_is_taken_over_within_the_lease(
        reference: list[dict[str, Any]], tmp_path: Path, pg_url: str) -> None:
    """SIGKILL of the owner: once its lease (3 s here) has passed the other node takes the
    run over and it goes on exactly as the uninterrupted run, with no gap or duplicate."""
    takeovers = _scenario(reference, tmp_path, pg_url, signal.SIGKILL, restarts=1,
                          run=FASTER)
    print(f"SIGKILL takeover caught up after {takeovers[0]:.2f} s (lease 3 s)")
