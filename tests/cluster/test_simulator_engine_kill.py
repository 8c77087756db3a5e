"""A run's engine process killed mid-run, while operations arrive through both nodes.

Two ``ridecast serve`` nodes on PostgreSQL and Redis, engine processes on: a run computes in
an engine process of its owner, with a snapshot every simulated minute. Mid-run that
engine process (not the node) is killed with SIGKILL while a client sends bookings and
cancels through both nodes in turn. The run must go on from its newest snapshot and finish,
and its event log must show:

* every acknowledged operation exactly once (each booking answered 201 is created once,
  each cancel answered 200 cancels once), and every operation answered 503 not at all;
* no event twice and none missing: the events are in simulated-time order, none repeats,
  the periodic ``vehicle_states`` come every ``snapshot_interval_s`` without a hole from
  start to finish, and every booking created was answered (``offers`` or ``no_offer``).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.cluster.test_simulator_takeover import _events
from tests.conftest import (
    Server,
    User,
    drop_cluster_pair,
    engine_processes,
    launch_cluster_pair,
)
from tests.waiting import eventually

SNAPSHOT_EVERY_S = 60
ENV = {"RIDECAST_SIMULATOR_ENGINE_PROCESSES": "1", "RIDECAST_SIMULATOR_LEASE_S": "3",
       "RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S": "2",
       "RIDECAST_SIMULATOR_SNAPSHOT_EVERY_S": str(SNAPSHOT_EVERY_S), "RIDECAST_LOG_LEVEL": "info"}
SNAPSHOT_INTERVAL_S = 60.0
DURATION_S = 600
RUN = {"simulator": {"seed": 8, "vehicles": 12, "speed": 20, "bookings_per_hour": 240,
                     "duration_s": DURATION_S, "start_ts": "2024-05-06T08:00:00+00:00",
                     "network": "straight", "snapshot_interval_s": SNAPSHOT_INTERVAL_S,
                     "vehicle_speed_kmh": 90, "max_wait_s": 300,
                     "area": {"lat": 57.705, "lon": 11.963, "radius_m": 3000}}}
"""Demand for 600 simulated s at 20x: the engine is killed past its second snapshot and the
run goes on well past its takeover, with demand left, while operations are sent before,
during and after it. Fast vehicles and a short longest wait end the trips soon after the
demand, so the test waits little for the run to finish; no claim depends on the fleet."""


def _engine_processes(node: Server) -> list[psutil.Process]:
    return engine_processes(node.process.pid)


def _status(node: Server, user: User, sim: int) -> dict[str, Any]:
    with node.client(user) as http:
        response = http.get(f"/api/v2/simulation/{sim}/simulator")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _sim_s(status: dict[str, Any]) -> float:
    if status.get("sim_ts") is None:
        return 0.0
    return (datetime.fromisoformat(status["sim_ts"])
            - datetime.fromisoformat(status["started_sim_ts"])).total_seconds()


class Operator(threading.Thread):
    """Books and cancels through both nodes in turn until stopped; records every answer.

    Each booking has a pickup of its own (``pickup_lat`` tells them apart in the log)."""

    def __init__(self, nodes: list[Server], user: User, sim: int) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.user = user
        self.sim = sim
        self.bookings: list[tuple[float, int, dict[str, Any]]] = []  # (pickup_lat, code, body)
        self.cancels: list[tuple[str, int]] = []  # (booking uid, code)
        self.failures: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        clients = [node.client(self.user) for node in self.nodes]
        base = f"/api/v2/simulation/{self.sim}"
        cancellable: list[dict[str, Any]] = []
        i = 0
        try:
            while not self._halt.is_set():
                http = clients[i % 2]
                pickup_lat = round(57.70 + i * 1e-5, 6)
                try:
                    response = http.post(base + "/bookings", json={
                        "pickup_lat": pickup_lat, "pickup_lon": 11.96,
                        "dropoff_lat": 57.715, "dropoff_lon": 11.975}, timeout=30)
                except httpx.HTTPError as exc:  # no answer: neither acknowledged nor refused
                    self.failures.append(f"booking {i}: {exc!r}")
                else:
                    body = response.json()
                    self.bookings.append((pickup_lat, response.status_code, body))
                    if response.status_code == 201:
                        cancellable.append(body["booking"])
                if i % 3 == 2 and cancellable:
                    booking = cancellable.pop(0)
                    try:  # through the other node than the booking's
                        response = clients[(i + 1) % 2].post(
                            f"{base}/bookings/{booking['id']}/cancel", timeout=30)
                    except httpx.HTTPError as exc:
                        self.failures.append(f"cancel {booking['id']}: {exc!r}")
                    else:
                        self.cancels.append((booking["uid"], response.status_code))
                i += 1
                time.sleep(0.05)
        finally:
            for http in clients:
                http.close()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(60)


def test_a_killed_engine_process_loses_no_operation_and_no_event(tmp_path: Path) -> None:
    pair = launch_cluster_pair(tmp_path, ENV)
    operator: Operator | None = None
    try:
        assert pair.other is not None
        nodes: list[Server] = [pair, pair.other]
        user = pair.create_user()
        sim = pair.create_simulation(user, RUN)
        with pair.client(user) as http:
            started = http.post(f"/api/v2/simulation/{sim}/simulator/start")
        assert started.status_code == 200, started.text
        owner = next(node for node in nodes if _engine_processes(node))
        operator = Operator(nodes, user, sim)
        operator.start()
        # Past two snapshots, with operations journaled after the newest.
        eventually(lambda: _sim_s(_status(pair, user, sim)) > 2.5 * SNAPSHOT_EVERY_S,
                   timeout=120, what="the run past its second snapshot")
        (engine,) = _engine_processes(owner)
        engine.send_signal(signal.SIGKILL)
        killed_at = _sim_s(_status(owner, user, sim))
        eventually(lambda: [p for p in _engine_processes(owner) + _engine_processes(
            nodes[1 - nodes.index(owner)]) if p.pid != engine.pid], timeout=120,
                   what="a new engine process")
        eventually(lambda: (s := _status(pair, user, sim))["status"] == "running"
                   and s.get("takeover") is None and _sim_s(s) > killed_at + 120,
                   timeout=120, what="the run going on past its engine's death")
        operator.stop()
        eventually(lambda: _status(pair, user, sim)["status"] == "finished", timeout=240,
                   what="the run finished")
        eventually(lambda: _status(nodes[1], user, sim)["status"] == "finished",
                   timeout=120, what="node B seeing the run finished")
        logs = pair.logs()
        assert "taken over" in logs and "its snapshot at" in logs, "not from a snapshot"

        events = _events(pair, user, sim)
        assert not operator.failures, operator.failures
        codes = Counter(code for _lat, code, _body in operator.bookings)
        assert set(codes) <= {201, 503}, [(code, body) for _lat, code, body
                                          in operator.bookings if code not in (201, 503)]
        assert codes[201] > 20, codes
        cancel_codes = Counter(code for _uid, code in operator.cancels)
        assert set(cancel_codes) <= {200, 409, 503}, cancel_codes

        # No event twice; in simulated-time order.
        bodies = Counter(json.dumps({k: v for k, v in e.items()
                                     if k not in ("server_ts", "event_id")}, sort_keys=True)
                         for e in events)
        twice = [body[:200] for body, n in bodies.items() if n > 1]
        assert not twice, twice
        times = [datetime.fromisoformat(e["current_sim_ts"]) for e in events]
        assert times == sorted(times)
        # None missing: the periodic states every interval, from start to finish.
        states = [datetime.fromisoformat(e["current_sim_ts"]) for e in events
                  if e["message_type"] == "vehicle_states"]
        gaps = {(b - a).total_seconds() for a, b in pairwise(states)}
        assert gaps == {SNAPSHOT_INTERVAL_S}, gaps
        assert (states[-1] - states[0]).total_seconds() >= DURATION_S - 2 * SNAPSHOT_INTERVAL_S

        created: Counter[float] = Counter()
        uids: dict[float, str] = {}
        answered: set[str] = set()
        cancelled: Counter[int] = Counter()
        for e in events:
            kind, data = e["message_type"], e["data"]
            if kind == "bookings":
                for booking in data["bookings"]:
                    created[booking["pickup_lat"]] += 1
                    uids[booking["pickup_lat"]] = booking["uid"]
            elif kind == "offers":
                answered.update(offer["booking_id"] for offer in data["offers"])
            elif kind == "no_offer":
                answered.update(data["booking_uids"])
            elif kind == "bookings_cancellation" and data["reason"] == "operator":
                cancelled.update(data["booking_ids"])
        assert set(uids.values()) <= answered, "a booking created and never answered"
        for pickup_lat, code, body in operator.bookings:
            if code == 201:
                assert created[pickup_lat] == 1, (pickup_lat, created[pickup_lat])
                assert uids[pickup_lat] == body["booking"]["uid"]
            else:
                assert created[pickup_lat] == 0, ("answered 503, yet created", pickup_lat)
        ids = {body["booking"]["uid"]: body["booking"]["id"]
               for _lat, code, body in operator.bookings if code == 201}
        for uid, code in operator.cancels:
            assert cancelled[ids[uid]] == (1 if code == 200 else 0), (uid, code)
    finally:
        if operator is not None:
            operator.stop()
        drop_cluster_pair(pair)
