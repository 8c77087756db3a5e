"""An organisation's quotas hold for the cluster: two real nodes on one PostgreSQL and one
Redis (``launch_cluster_pair``) count each quota together (runs, vehicles per run and in
total, simulations, templates, simulator events per second, stored event bytes), so the
second node refuses what the first node's usage fills; a refusal is its documented 4xx
and starts nothing of the run (no lease row, no journal, no event); a stopped, finished or
taken-over run gives its slot back exactly once; and the usage shows in ``/metrics``."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.privateredis import PrivateRedis
from tests.conftest import (
    REDIS_URL,
    CrossNodeServer,
    Server,
    User,
    drop_cluster_pair,
    launch_cluster_pair,
    launch_server,
)
from tests.hub.wsutil import envelope
from tests.waiting import eventually

QUOTAS = {"RIDECAST_QUOTA_RUNS_PER_ORG": "2", "RIDECAST_QUOTA_VEHICLES_PER_RUN": "50",
          "RIDECAST_QUOTA_VEHICLES_PER_ORG": "60", "RIDECAST_QUOTA_SIMULATIONS_PER_ORG": "4",
          "RIDECAST_QUOTA_TEMPLATES_PER_ORG": "2", "RIDECAST_QUOTA_EVENTS_PER_S_PER_ORG": "150"}
"""Small quotas; each test has its own organisation, so they do not meet."""

SLOW = {"seed": 3, "vehicles": 5, "speed": 1, "duration_s": 7200, "network": "straight",
        "bookings_per_hour": 0}
"""A run that stays running for the test's length and publishes little."""

SEEDED = {"seed": 21, "vehicles": 6, "bookings_per_hour": 300, "duration_s": 300,
          "start_ts": "2024-05-06T08:00:00+00:00", "network": "straight",
          "area": {"lat": 57.705, "lon": 11.963, "radius_m": 3000}, "speed": "max"}
"""A short run at full speed: far more events per second than the quota lets through."""


def _drop(pair: CrossNodeServer) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{pair.bus_prefix}:limits:*"):
        client.delete(key)
    drop_cluster_pair(pair)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    pair = launch_cluster_pair(tmp_path_factory.mktemp("quotas"), QUOTAS)
    assert pair.other is not None
    yield pair, pair.other
    _drop(pair)


def _post(srv: Server, user: User, path: str, body: Any = None) -> httpx.Response:
    with srv.client(user) as http:
        return http.post(path, json=body)


def _start(srv: Server, user: User, sim: int) -> httpx.Response:
    return _post(srv, user, f"/api/v2/simulation/{sim}/simulator/start")


def _status(srv: Server, user: User, sim: int) -> dict[str, Any]:
    with srv.client(user) as http:
        body: dict[str, Any] = http.get(f"/api/v2/simulation/{sim}/simulator").json()
        return body


def _events(srv: Server, user: User, sim: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after: Any = None
    with srv.client(user) as http:
        while True:
            params: dict[str, Any] = {"limit": 1000}
            if after is not None:
                params["after"] = after
            page = http.get(f"/api/v2/simulation/{sim}/events", params=params).json()
            out += page["objects"]
            if len(page["objects"]) < 1000:
                return out
            after = page["objects"][-1]["event_id"]


def _org(srv: Server, user: User, sim: int) -> int:
    with srv.client(user) as http:
        return int(http.get(f"/api/v2/simulation/{sim}").json()["organisation_id"])


def _refused(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert error["details"][0]["quota"] == code
    return error


def _row_counts(database_url: str, sim: int) -> tuple[int, int]:
    """The simulation's ``simulator_runs`` rows and journal entries, read from PostgreSQL."""
    import asyncpg

    async def read() -> tuple[int, int]:
        conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
        try:
            runs = await conn.fetchval(
                "SELECT count(*) FROM simulator_runs WHERE simulation_id = $1", sim)
            journal = await conn.fetchval(
                "SELECT count(*) FROM simulator_journal WHERE simulation_id = $1", sim)
        finally:
            await conn.close()
        return int(runs), int(journal)

    return asyncio.run(read())


def _nothing_started(srv: Server, user: User, sim: int) -> None:
    """A refused start left no lease row, no journal and no event, and reads idle."""
    assert _row_counts(srv.database_url, sim) == (0, 0)
    assert _events(srv, user, sim) == []
    assert _status(srv, user, sim)["status"] == "idle"


def _stored_bytes(database_url: str) -> int:
    """Bytes of every stored event body, read from PostgreSQL."""
    import asyncpg

    async def read() -> int:
        conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
        try:
            return int(await conn.fetchval(
                "SELECT coalesce(sum(octet_length(body)), 0) FROM events"))
        finally:
            await conn.close()

    return asyncio.run(read())


def _shared_bytes(pair: CrossNodeServer, org: int) -> int:
    import redis

    value = redis.Redis.from_url(REDIS_URL).get(f"{pair.bus_prefix}:limits:quota:bytes:{org}")
    return int(value or 0)


def _usage(srv: Server, org: int, quota: str) -> float | None:
    text = httpx.get(f"{srv.base_url}/metrics").text
    found = re.search(
        rf'^ridecast_quota_usage{{organisation="{org}",quota="{quota}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def _metric(srv: Server, name: str) -> float:
    text = httpx.get(f"{srv.base_url}/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_concurrent_runs_are_counted_over_both_nodes(nodes: tuple[Server, Server]) -> None:
    """Two runs, one started on each node, fill the quota of 2: a third start is 429
    quota_runs on either node and starts nothing; the usage reads 2 on both nodes'
    /metrics; stopping one (through the other node) gives its slot back."""
    a, b = nodes
    user = a.create_user()
    sims = [a.create_simulation(user, {"simulator": SLOW}) for _ in range(3)]
    org = _org(a, user, sims[0])
    assert _start(a, user, sims[0]).status_code == 200
    assert _start(b, user, sims[1]).status_code == 200
    for srv in (a, b):
        _refused(_start(srv, user, sims[2]), 429, "quota_runs")
    _nothing_started(b, user, sims[2])
    for srv in (a, b):
        eventually(lambda srv=srv: _usage(srv, org, "runs") == 2, what="runs usage in /metrics",
                   timeout=60, step=0.1)
        eventually(lambda srv=srv: _usage(srv, org, "vehicles") == 10, what="vehicles usage",
                   timeout=60, step=0.1)
    assert _post(b, user, f"/api/v2/simulation/{sims[0]}/simulator/stop").status_code == 200
    assert _start(a, user, sims[2]).status_code == 200
    # A start of a run that is already running is its 409, not a quota refusal.
    assert _start(b, user, sims[1]).status_code == 409
    for sim in sims[1:]:
        assert _post(a, user, f"/api/v2/simulation/{sim}/simulator/stop").status_code == 200


def test_vehicles_per_run_and_in_total_are_counted_over_both_nodes(
    nodes: tuple[Server, Server],
) -> None:
    """51 vehicles in one run is 403 quota_vehicles_per_run on either node; 40 running on
    the first node leave room for 20, not 30, on the second (429 quota_vehicles); a finished
    run gives its vehicles back."""
    a, b = nodes
    user = a.create_user()
    big = a.create_simulation(user, {"simulator": {**SLOW, "vehicles": 51}})
    for srv in (a, b):
        _refused(_start(srv, user, big), 403, "quota_vehicles_per_run")
    _nothing_started(a, user, big)
    forty = a.create_simulation(user, {"simulator": {**SLOW, "vehicles": 40}})
    thirty = a.create_simulation(user, {"simulator": {**SLOW, "vehicles": 30}})
    short = a.create_simulation(user, {"simulator": {**SLOW, "vehicles": 20, "speed": "max",
                                                     "duration_s": 60}})
    assert _start(a, user, forty).status_code == 200
    error = _refused(_start(b, user, thirty), 429, "quota_vehicles")
    assert error["details"][0]["used"] == 40
    _nothing_started(b, user, thirty)
    assert _start(b, user, short).status_code == 200  # 40 + 20: exactly the quota
    eventually(lambda: _status(a, user, short)["status"] == "finished", what="the short run",
               timeout=60, step=0.1)
    assert _post(b, user, f"/api/v2/simulation/{forty}/simulator/stop").status_code == 200
    assert _start(b, user, thirty).status_code == 200
    assert _post(a, user, f"/api/v2/simulation/{thirty}/simulator/stop").status_code == 200


def test_simulations_and_templates_are_counted_over_both_nodes(
    nodes: tuple[Server, Server],
) -> None:
    """Simulations created through both nodes fill the quota of 4: the 5th is 403
    quota_simulations on either node and creates nothing; deleting one makes room. The
    same for templates (2)."""
    a, b = nodes
    user = a.create_user()
    other = a.create_user(user.org)  # another user of the same organisation
    made = [srv.create_simulation(u) for srv, u in ((a, user), (b, other), (a, other),
                                                    (b, user))]
    for srv in (a, b):
        _refused(_post(srv, user, "/api/v2/simulation", {"name": "x", "data": {}}), 403,
                 "quota_simulations")
    with a.client(user) as http:
        assert http.get("/api/v2/simulation").json()["meta"]["total_count"] == 4
        assert http.delete(f"/api/v2/simulation/{made[0]}").status_code == 204
    assert _post(b, other, "/api/v2/simulation", {"name": "x", "data": {}}).status_code == 201
    for srv in (a, b):
        assert _post(srv, user, "/api/v2/simulation_template",
                     {"name": "t", "data": {}}).status_code == 201
    for srv in (a, b):
        _refused(_post(srv, other, "/api/v2/simulation_template", {"name": "t", "data": {}}),
                 403, "quota_templates")


def test_events_per_second_throttle_without_dropping(
    nodes: tuple[Server, Server], tmp_path: Path,
) -> None:
    """Two full-speed runs of one organisation, one on each node, share its 150 events a
    second: both nodes throttle (ridecast_quota_throttled_seconds_total rises on each),
    and each run still publishes exactly the events of the same run on a server with the
    default quota (nothing dropped, nothing reordered)."""
    reference_server = launch_server(tmp_path)
    try:
        ref_user = reference_server.create_user()
        ref_sim = reference_server.create_simulation(ref_user, {"simulator": SEEDED})
        assert _start(reference_server, ref_user, ref_sim).status_code == 200
        eventually(lambda: _status(reference_server, ref_user, ref_sim)["status"] == "finished",
                   timeout=120, what="the reference run", step=0.1)
        reference = _events(reference_server, ref_user, ref_sim)
    finally:
        reference_server.stop()
    assert len(reference) > 600  # more than a few seconds' worth at the quota
    a, b = nodes
    before = [_metric(srv, "ridecast_quota_throttled_seconds_total") for srv in (a, b)]
    user = a.create_user()
    sims = [a.create_simulation(user, {"simulator": SEEDED}) for _ in range(2)]
    assert _start(a, user, sims[0]).status_code == 200
    assert _start(b, user, sims[1]).status_code == 200
    for sim in sims:
        eventually(lambda sim=sim: _status(a, user, sim)["status"] == "finished", timeout=180,
                   what="the throttled runs", step=0.1)
    after = [_metric(srv, "ridecast_quota_throttled_seconds_total") for srv in (a, b)]
    assert after[0] > before[0] and after[1] > before[1]

    def produced(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items()
                 if k not in ("server_ts", "event_id", "simulation_id")} for e in events]

    for sim in sims:
        assert produced(_events(a, user, sim)) == produced(reference)


def test_a_killed_nodes_run_keeps_one_slot_and_gives_it_back(tmp_path: Path) -> None:
    """Quota 1 run: the owner is SIGKILLed; once its lease has passed the other node takes
    the run over, and the run still holds the one slot (counted once, not lost and not
    twice): a second start is 429; stopping the run gives the slot back."""
    pair = launch_cluster_pair(tmp_path, {"RIDECAST_QUOTA_RUNS_PER_ORG": "1",
                                          "RIDECAST_SIMULATOR_LEASE_S": "2"})
    try:
        assert pair.other is not None
        a, b = pair, pair.other
        user = a.create_user()
        run, second = (a.create_simulation(user, {"simulator": SLOW}) for _ in range(2))
        assert _start(a, user, run).status_code == 200
        killed = _status(b, user, run)["owner_node"]
        a.process.send_signal(signal.SIGKILL)
        a.process.wait()

        def taken_over() -> bool:
            status = _status(b, user, run)
            return (status.get("owner_node") not in (None, killed)
                    and status.get("takeover") is None)

        eventually(taken_over, timeout=60, what="the takeover", step=0.1)
        _refused(_start(b, user, second), 429, "quota_runs")
        assert _post(b, user, f"/api/v2/simulation/{run}/simulator/stop").status_code == 200
        assert _start(b, user, second).status_code == 200
        assert _post(b, user, f"/api/v2/simulation/{second}/simulator/stop").status_code == 200
    finally:
        _drop(pair)


def test_stored_event_bytes_are_counted_over_both_nodes_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    """Events posted through the first node fill the organisation's bytes: the second node
    refuses the next batch with 403 quota_event_bytes and stores nothing of it; a simulator
    run of the organisation stops with that error; after both nodes restart, the limit
    still holds (recounted from the store); another organisation is not affected."""
    limit = 20_000
    pair = launch_cluster_pair(tmp_path, {"RIDECAST_QUOTA_EVENT_BYTES_PER_ORG": str(limit)})
    try:
        assert pair.other is not None
        a, b = pair, pair.other
        user = a.create_user()
        sim = a.create_simulation(user)
        batch = [envelope(sim, "vehicle_use", i) for i in range(20)]
        stored = 0
        with a.client(user) as http:
            while True:
                response = http.post(f"/api/v2/simulation/{sim}/events", json=batch)
                if response.status_code != 201:
                    break
                stored += len(batch)
                assert stored < 10_000, "the quota never refused"
        _refused(response, 403, "quota_event_bytes")
        org = _org(a, user, sim)
        # The first node adds what it appended to the shared total within a second.
        eventually(lambda: _shared_bytes(pair, org) == _stored_bytes(a.database_url), timeout=10,
                   what="the first node's bytes on Redis", step=0.1)
        _refused(_post(b, user, f"/api/v2/simulation/{sim}/events", batch), 403,
                 "quota_event_bytes")
        assert len(_events(b, user, sim)) == stored
        running = a.create_simulation(user, {"simulator": {**SLOW, "speed": "max"}})
        assert _start(b, user, running).status_code == 200
        eventually(lambda: _status(a, user, running)["status"] == "stopped", timeout=30,
                   what="the run to stop", step=0.1)
        assert "RIDECAST_QUOTA_EVENT_BYTES_PER_ORG" in str(_status(a, user, running)["error"])
        pair.stop()
        a = launch_server(tmp_path / "a", a.env, database_url=a.database_url, port=a.port)
        b = launch_server(tmp_path / "b", b.env, database_url=b.database_url, port=b.port)
        try:
            for srv in (a, b):
                _refused(_post(srv, user, f"/api/v2/simulation/{sim}/events", batch),
                         403, "quota_event_bytes")
            stranger = a.create_user()
            theirs = b.create_simulation(stranger)
            assert _post(b, stranger, f"/api/v2/simulation/{theirs}/events",
                         [envelope(theirs, "vehicle_use", 1)]).status_code == 201
        finally:
            b.stop()
            a.stop()
    finally:
        _drop(pair)


def test_quotas_hold_on_a_node_whose_redis_is_down(
    tmp_path: Path, pg_url: str, private_redis: PrivateRedis,
) -> None:
    """Redis killed: a start is still decided (the runs are counted in the store, the lock
    is the node's own), the second run is 429 quota_runs and starts nothing, a running
    run's events still flow (the events-per-second bucket is the node's own), and ingest
    still answers."""
    srv = launch_server(tmp_path, {"RIDECAST_BUS_URL": private_redis.url,
                                   "RIDECAST_QUOTA_RUNS_PER_ORG": "1",
                                   "RIDECAST_BUS_TIMEOUT_S": "0.5"}, database_url=pg_url)
    try:
        user = srv.create_user()
        first, second = (srv.create_simulation(user, {"simulator": {**SLOW, "speed": 30}})
                         for _ in range(2))
        private_redis.kill()
        assert _start(srv, user, first).status_code == 200
        _refused(_start(srv, user, second), 429, "quota_runs")
        _nothing_started(srv, user, second)
        eventually(lambda: len(_events(srv, user, first)) > 20, timeout=60, what="the run's events",
                   step=0.1)
        assert _post(srv, user, f"/api/v2/simulation/{second}/events",
                     [envelope(second, "vehicle_use", 1)]).status_code == 201
        assert _post(srv, user, f"/api/v2/simulation/{first}/simulator/stop").status_code == 200
    finally:
        srv.stop()
        private_redis.start()
