"""``ridecast simulator``: runs on dedicated processes, API nodes free of engines.

One ``ridecast serve`` node with ``RIDECAST_SIMULATOR_HOST=false`` and one ``ridecast
simulator`` process, on PostgreSQL and Redis. A run started through the API node runs on
the simulator process (the API node has no engine process); its operations and controls
sent to the API node reach it; its events reach a websocket stream on the API node. The
simulator process is then killed with SIGKILL and another started: the run goes on there,
from where it was, and the stream on the API node goes on too.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.conftest import Server, engine_processes
from tests.hub.wsutil import open_stream
from tests.waiting import eventually_async

SETTINGS = {"seed": 5, "vehicles": 8, "bookings_per_hour": 600, "duration_s": 7200,
            "start_ts": "2024-05-06T08:00:00+00:00", "network": "straight",
            "area": {"lat": 57.705, "lon": 11.963, "radius_m": 3000}, "speed": 30}
TRIP = {"pickup_lat": 57.70, "pickup_lon": 11.96, "dropoff_lat": 57.71, "dropoff_lon": 11.97,
        "passengers": 1}
ENV = {"RIDECAST_SIMULATOR_LEASE_S": "2", "RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S": "10",
       "RIDECAST_SIMULATOR_SNAPSHOT_EVERY_S": "120"}
RUNNING = re.compile(r"ridecast: simulator running on .* \(node (\w+)\)")


class SimulatorProcess:
    """A ``ridecast simulator`` with the API node's settings, logging to its own file."""

    def __init__(self, api: Server, log: Path) -> None:
        self.log = log
        env = {**api.env, "RIDECAST_LOG_LEVEL": "info"}
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ridecast.cli.main", "simulator"], env=env,
                stdout=out, stderr=subprocess.STDOUT)

    def node(self) -> str | None:
        """Its node id, once it says it runs."""
        found = RUNNING.search(self.log.read_text(errors="replace"))
        return found.group(1) if found else None

    def engines(self) -> list[psutil.Process]:
        return engine_processes(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def test_runs_go_to_simulator_processes_and_survive_one(
        cluster: Callable[..., Server], tmp_path: Path) -> None:
    api = cluster({**ENV, "RIDECAST_SIMULATOR_HOST": "false"})
    first = SimulatorProcess(api, tmp_path / "simulator-1.log")
    second: SimulatorProcess | None = None
    user = api.create_user()
    sim = api.create_simulation(user, {"simulator": SETTINGS})
    base = f"/api/v2/simulation/{sim}"
    token = api.token(user)

    async def scenario() -> None:
        nonlocal second
        node_1 = await eventually_async(
            lambda: first.process.poll() is None and first.node(), timeout=60,
            what="the first simulator process running")
        stream = await open_stream(f"{api.ws_url}/simulation_events/{sim}?token={token}")
        async with httpx.AsyncClient(base_url=api.base_url, auth=user.auth,
                                     timeout=30) as http:

            async def status() -> dict[str, Any]:
                answer = await http.get(base + "/simulator")
                assert answer.status_code == 200, answer.text
                body: dict[str, Any] = answer.json()
                return body

            async def book() -> int | None:
                answer = await http.post(base + "/bookings", json=TRIP)
                if answer.status_code == 503:  # being taken over: not acknowledged
                    return None
                assert answer.status_code == 201, answer.text
                return int(answer.json()["booking"]["id"])

            async def start() -> httpx.Response | None:
                # A 503 took no effect (docs/errors.md): retried, as a client does, while
                # a loaded machine keeps the simulator process from answering the offer.
                answer = await http.post(base + "/simulator/start")
                if answer.status_code == 503:
                    return None
                assert answer.status_code == 200, answer.text
                return answer

            started = await eventually_async(start, timeout=60, step=0.5,
                                             what="the run started")
            assert started.json()["owner_node"] == node_1
            await eventually_async(first.engines, timeout=60,
                                   what="an engine process of the simulator process")
            assert engine_processes(api.process.pid) == []

            # Operations and controls through the API node reach the run's owner.
            booked = await book()
            assert booked is not None
            paused = await http.post(base + "/simulator/pause")
            assert paused.status_code == 200, paused.text
            assert (await status())["status"] == "paused"
            resumed = await http.post(base + "/simulator/resume")
            assert resumed.status_code == 200, resumed.text

            # Its events reach the API node's stream, the booking's among them.
            def booked_seen() -> bool:
                return any(f.get("message_type") == "bookings"
                           and any(b.get("id") == booked
                                   for b in f.get("data", {}).get("bookings", []))
                           for f in stream.frames)

            await eventually_async(booked_seen, timeout=60,
                                   what="the booking's event on the API node's stream")
            before = (await status())["sim_ts"]

            first.process.send_signal(signal.SIGKILL)
            first.process.wait(10)
            second = SimulatorProcess(api, tmp_path / "simulator-2.log")
            node_2 = await eventually_async(
                lambda: second is not None and second.node(), timeout=60,
                what="the second simulator process running")

            async def taken_over() -> bool:
                body = await status()
                return (body["status"] == "running" and body.get("owner_node") == node_2
                        and body.get("takeover") is None and body["sim_ts"] > before)

            await eventually_async(taken_over, timeout=90,
                                   what="the run going on on the second process")
            seen = len(stream.frames)
            again = await eventually_async(book, timeout=30,
                                           what="a booking acknowledged after it")
            await eventually_async(lambda: len(stream.frames) > seen, timeout=60,
                                   what="events after the takeover")
            assert again is not None
            assert "taken over" in second.log.read_text(errors="replace")
            stopped = await http.post(base + "/simulator/stop")
            assert stopped.status_code == 200, stopped.text
        await stream.close()
        event_ids = stream.ids
        assert event_ids == sorted(set(event_ids))  # once each, in order

    try:
        asyncio.run(scenario())
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_the_role_needs_a_shared_bus(tmp_path: Path) -> None:
    """On the in-process bus no API node could reach a simulator process, nor a simulator
    process an API node: both refuse to start, saying why, rather than leave starts
    unanswered."""
    env = {**os.environ, "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'db'}",
           "RIDECAST_BUS_URL": "memory://"}
    role = subprocess.run([sys.executable, "-m", "ridecast.cli.main", "simulator"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert role.returncode == 2
    assert "RIDECAST_BUS_URL=redis://" in role.stderr
    api = subprocess.run([sys.executable, "-m", "ridecast.cli.main", "serve", "--port", "0",
                          "--no-simulator"], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert api.returncode != 0
    assert "RIDECAST_SIMULATOR_HOST=false" in api.stdout + api.stderr
