"""A simulator run rides out a storm of dropped database connections.

Two ``ridecast serve`` nodes on PostgreSQL and Redis run a seeded run while every
connection the nodes hold to the database is terminated (``pg_terminate_backend``) over
and over. The run must keep running (a transient fault never ends it: its writes are tried
again while its lease holds, or it is taken over when the lease lapses) and finish with
exactly the stream the same run publishes undisturbed on one embedded process: no event
twice, none missing, in order (``server_ts`` and ``event_id`` aside).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from tests.cluster.test_simulator_takeover import SETTINGS, _events, _produced
from tests.conftest import (
    POSTGRES_ADMIN_URL,
    Server,
    User,
    drop_cluster_pair,
    launch_cluster_pair,
    launch_server,
)
from tests.waiting import eventually

ENV = {"RIDECAST_SIMULATOR_LEASE_S": "4", "RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S": "2"}
RUN = {"simulator": {**SETTINGS, "speed": 40}}
"""About 40 s of wall time: the storm (12 s from the run's 50th event) blows while the run
is well short of its end, and the test does not wait long for the finish after it."""
REFERENCE = {"simulator": {**SETTINGS, "speed": "max"}}


def _status(server: Server, user: User, sim: int) -> dict[str, Any] | None:
    """The run's status, or None while the node answers 503 (the store is down)."""
    with server.client(user) as http:
        response = http.get(f"/api/v2/simulation/{sim}/simulator")
    if response.status_code == 503:
        return None
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


class Storm(threading.Thread):
    """Terminates every connection to ``database`` but its own, every ``every_s``, until
    stopped; counts the connections it ended."""

    def __init__(self, database: str, every_s: float = 0.4) -> None:
        super().__init__(daemon=True)
        self.database = database
        self.every_s = every_s
        self.terminated = 0
        self._halt = threading.Event()

    def run(self) -> None:
        asyncio.run(self._storm())

    async def _storm(self) -> None:
        conn = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            while not self._halt.is_set():
                ended = await conn.fetchval(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM "
                    "pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()) t",
                    self.database)
                self.terminated += int(ended or 0)
                await asyncio.sleep(self.every_s)
        finally:
            await conn.close()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(10)


def test_a_storm_of_dropped_connections_neither_ends_nor_changes_the_run(
        tmp_path: Path) -> None:
    """Connections terminated every 0.4 s for a good part of the run: it keeps running
    (never ``stopped``), finishes, and its stream is the undisturbed run's exactly."""
    embedded = launch_server(tmp_path / "embedded")
    try:
        user = embedded.create_user()
        sim = embedded.create_simulation(user, REFERENCE)
        with embedded.client(user) as http:
            assert http.post(f"/api/v2/simulation/{sim}/simulator/start").status_code == 200
        eventually(lambda: (_status(embedded, user, sim) or {}).get("status") == "finished",
                   timeout=120.0)
        reference = [_produced(e) for e in _events(embedded, user, sim)]
    finally:
        embedded.stop()
    assert len(reference) > 500

    (tmp_path / "pair").mkdir()
    pair = launch_cluster_pair(tmp_path / "pair", ENV)
    storm = Storm(pair.database_url.rsplit("/", 1)[1])
    try:
        assert pair.other is not None
        user = pair.create_user()
        sim = pair.create_simulation(user, RUN)
        with pair.client(user) as http:
            assert http.post(f"/api/v2/simulation/{sim}/simulator/start").status_code == 200
        eventually(lambda: len(_events(pair, user, sim)) > 50, timeout=120.0)
        storm.start()
        seen: list[str] = []
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:  # the storm blows this long, statuses read
            for node in (pair, pair.other):
                try:
                    status = _status(node, user, sim)
                except httpx.HTTPError:
                    continue
                if status is not None:
                    seen.append(str(status["status"]))
            time.sleep(0.2)
        storm.stop()
        assert storm.terminated > 10
        assert "stopped" not in seen and "interrupted" not in seen, seen
        eventually(lambda: (_status(pair, user, sim) or {}).get("status") == "finished",
                   timeout=240)
        final = _status(pair, user, sim)
        assert final is not None and final["error"] is None
        produced = [_produced(e) for e in _events(pair, user, sim)]
        assert len(produced) == len(reference)
        assert produced == reference
    finally:
        try:
            storm.stop()
        finally:
            drop_cluster_pair(pair)
