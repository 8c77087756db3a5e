"""Engines compute in engine processes that ``ridecast serve`` starts and supervises."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import psutil

from ridecast.simulator.hosting.engine_pool import default_size
from tests.conftest import Server, User
from tests.conftest import engine_processes as running_engines
from tests.waiting import eventually

CENTRE = {"lat": 52.52, "lon": 13.405, "radius_m": 2000}


def busy(seed: int, *, duration_s: float = 6 * 3600) -> dict[str, Any]:
    """A run at 'max' with enough to compute that it lasts a while."""
    return {"simulator": {
        "seed": seed, "vehicles": 150, "speed": "max", "bookings_per_hour": 1500,
        "duration_s": duration_s, "area": CENTRE, "start_ts": "2024-01-01T08:00:00+00:00",
    }}


def engine_processes(server: Server) -> list[psutil.Process]:
    """The serving process's engine processes."""
    return running_engines(server.process.pid)


class Run:
    """One user's simulation whose simulator a test starts and watches."""

    def __init__(self, server: Server, data: dict[str, Any], user: User | None = None) -> None:
        self.user = user or server.create_user()
        self.id = server.create_simulation(self.user, data)
        self.http = server.client(self.user)
        self.base = f"/api/v2/simulation/{self.id}/simulator"

    def start(self) -> dict[str, Any]:
        response = self.http.post(self.base + "/start")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def status(self) -> dict[str, Any]:
        response = self.http.get(self.base)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def sim_s(self) -> float:
        """Simulated seconds the run has reached."""
        status = self.status()
        if status["sim_ts"] is None:
            return 0.0
        return (datetime.fromisoformat(status["sim_ts"])
                - datetime.fromisoformat(status["started_sim_ts"])).total_seconds()

    def progress(self) -> tuple[float, float]:
        """Simulated seconds reached and CPU seconds its engine computed so far."""
        status = self.status()
        if status["sim_ts"] is None:
            return 0.0, 0.0
        return ((datetime.fromisoformat(status["sim_ts"])
                 - datetime.fromisoformat(status["started_sim_ts"])).total_seconds(),
                float(status["engine_cpu_s"]))

    def close(self) -> None:
        self.http.post(self.base + "/stop")
        self.http.close()


def metric(server: Server, name: str) -> float:
    text = httpx.get(server.base_url + "/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


def test_engine_computes_in_another_process(start_server: Callable[..., Server]) -> None:
    """A run's engine lives in a child process of the server, which spends the CPU time of
    the computation while the run advances."""
    server = start_server({"RIDECAST_SIMULATOR_ENGINE_PROCESSES": "1"})
    assert engine_processes(server) == []  # started when a run needs one
    run = Run(server, busy(1))
    try:
        run.start()
        (child,) = eventually(lambda: engine_processes(server), timeout=60,
                              what="an engine process")
        assert child.pid != server.process.pid
        cpu0 = sum(child.cpu_times()[:2])
        at0 = run.sim_s()
        eventually(lambda: run.sim_s() > at0 + 1800, timeout=60, what="half an hour simulated")
        assert sum(child.cpu_times()[:2]) > cpu0  # the engine process computed it
        assert metric(server, "ridecast_simulator_engines") == 1
        assert metric(server, "ridecast_simulator_engine_processes") == 1
    finally:
        run.close()


def test_by_default_a_cpu_is_left_to_the_server(start_server: Callable[..., Server]) -> None:
    """Without RIDECAST_SIMULATOR_ENGINE_PROCESSES, two runs at 'max' of two organisations
    get one engine process per CPU but one (each its own while there are enough), at the
    default lower priority."""
    server = start_server({})
    runs = [Run(server, busy(7)), Run(server, busy(8))]
    expected = min(len(runs), default_size())
    try:
        for run in runs:
            run.start()
        children = eventually(lambda: len(found := engine_processes(server)) == expected
                              and found, timeout=60, what=f"{expected} engine process(es)")
        server_nice = psutil.Process(server.process.pid).nice()
        assert [child.nice() for child in children] == [min(19, server_nice + 10)] * expected
        assert metric(server, "ridecast_simulator_engine_processes") == expected
        assert metric(server, "ridecast_simulator_engines") == len(runs)
    finally:
        for run in runs:
            run.close()


def test_a_killed_engine_process_costs_its_run_a_takeover_not_the_run(
        start_server: Callable[..., Server]) -> None:
    """Killing the engine process mid-run does not end the run: its node gives it up and
    takes it over at once from its newest snapshot and journal, in a fresh engine process,
    and the run's events hold no event twice; the server keeps answering throughout."""
    server = start_server({"RIDECAST_SIMULATOR_ENGINE_PROCESSES": "1",
                           "RIDECAST_SIMULATOR_SNAPSHOT_EVERY_S": "300",
                           "RIDECAST_LOG_LEVEL": "info"})
    run = Run(server, busy(2, duration_s=3 * 3600))
    try:
        run.start()
        eventually(lambda: run.sim_s() > 900, timeout=60, what="the run under way, past a snapshot")
        (child,) = engine_processes(server)
        child.send_signal(signal.SIGKILL)
        killed_at = run.sim_s()
        assert httpx.get(server.base_url + "/healthz").status_code == 200
        eventually(lambda: [p for p in engine_processes(server) if p.pid != child.pid],
                   timeout=60, what="a fresh engine process")
        eventually(lambda: (s := run.status())["status"] == "running"
                   and s.get("takeover") is None and run.sim_s() > killed_at + 600,
                   timeout=120, what="the run going on past where its engine died")
        assert metric(server, "ridecast_simulator_engine_processes_lost_total") == 1
        assert "taken over" in server.logs() and "its snapshot at" in server.logs()
        run.http.post(run.base + "/stop")
        seen: set[bytes] = set()
        after = 0
        while True:
            page = run.http.get(f"/api/v2/simulation/{run.id}/events",
                                params={"after": after, "limit": 1000}).json()["objects"]
            if not page:
                break
            for event in page:
                body = json.dumps({k: v for k, v in event.items()
                                   if k not in ("server_ts", "event_id")},
                                  sort_keys=True).encode()
                assert body not in seen, f"published twice: {body[:200]!r}"
                seen.add(body)
            after = page[-1]["event_id"]
        assert len(seen) > 1000
    finally:
        run.close()


def test_finished_run_frees_its_engine_and_the_process_is_recycled(
        start_server: Callable[..., Server]) -> None:
    """A finished run keeps its status and KPIs only: its engine is freed, and its engine
    process, left empty and grown, is ended."""
    server = start_server({"RIDECAST_SIMULATOR_ENGINE_PROCESSES": "1",
                           "RIDECAST_SIMULATOR_ENGINE_RECYCLE_MB": "0"})
    run = Run(server, busy(3, duration_s=1200))
    try:
        run.start()
        status = eventually(lambda: (s := run.status())["status"] == "finished" and s,
                            timeout=60, what="the run finished")
        assert status["kpis"]["bookings"] > 0
        assert metric(server, "ridecast_simulator_engines") == 0
        eventually(lambda: not engine_processes(server), timeout=60,
                   what="the engine process ended")
        assert metric(server, "ridecast_simulator_engine_processes") == 0
        assert run.status()["kpis"] == status["kpis"]  # kept after the engine went
    finally:
        run.close()


def test_max_speed_runs_share_fairly_by_organisation(
        start_server: Callable[..., Server]) -> None:
    """Two runs at 'max' of one organisation and one of another, in one engine process:
    the organisations get comparable shares of CPU, so the lone run computes about twice
    as long and advances about twice as fast as each of the other two (a share per run
    would give all three the same)."""
    server = start_server({"RIDECAST_SIMULATOR_ENGINE_PROCESSES": "1"})
    many = server.create_user()
    runs = [Run(server, busy(4), many), Run(server, busy(5), many), Run(server, busy(6))]
    try:
        for run in runs:
            run.start()
        eventually(lambda: all(run.sim_s() > 300 for run in runs), timeout=60, what="all under way")
        before = [run.progress() for run in runs]
        eventually(lambda: runs[2].sim_s() - before[2][0] > 3600, timeout=180,
                   what="an hour simulated by the lone run")
        after = [run.progress() for run in runs]
        gained = [a[0] - b[0] for a, b in zip(after, before, strict=True)]
        assert gained[2] > 1.3 * max(gained[:2]), gained
        assert gained[2] < 3.0 * min(gained[:2]), gained
        cpu = [a[1] - b[1] for a, b in zip(after, before, strict=True)]
        assert cpu[2] > 1.3 * max(cpu[:2]), cpu
        assert cpu[2] < 3.0 * min(cpu[:2]), cpu
    finally:
        for run in runs:
            run.close()
