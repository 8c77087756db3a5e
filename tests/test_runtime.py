"""Starting and stopping one process's parts (``app.open_runtime``, ``Runtime.close``): a
start that fails at its last step (the dedicated websocket port taken) stops everything it
had started, and leaves no task, thread, database or Redis connection behind; so does a
clean close. Run in this process, on SQLite with the in-process bus and on PostgreSQL with
a private ``redis-server``, with every part on (hub, simulator, webhook dispatcher)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ridecast.app import open_runtime
from ridecast.config import Settings
from ridecast.store.eventlog import NewEvent
from tests.cluster.privateredis import PrivateRedis
from tests.conftest import free_port, pg_backends
from tests.waiting import eventually


def _held_port() -> socket.socket:
    """A port some other program listens on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


class Backend:
    """Where the runtime under test keeps its state, and how to count what it holds open."""

    def __init__(self, database_url: str, bus_url: str, redis: PrivateRedis | None) -> None:
        self.database_url = database_url
        self.bus_url = bus_url
        self.redis = redis

    def open_connections(self) -> int:
        """Connections held to this backend's database and Redis (but ours counting)."""
        count = 0
        if self.database_url.startswith("postgresql"):
            count += pg_backends(self.database_url)
        if self.redis is not None:
            client = redis.Redis.from_url(self.redis.url)
            try:
                count += int(client.info("clients")["connected_clients"]) - 1  # less ours
            finally:
                client.close()
        return count


@pytest.fixture(params=["embedded", "cluster"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "embedded":
        yield Backend(f"sqlite+aiosqlite:///{tmp_path / 'ridecast.db'}", "memory://", None)
        return
    pg_url = request.getfixturevalue("pg_url")
    private = PrivateRedis(free_port(), tmp_path)
    private.start()
    try:
        yield Backend(pg_url, private.url, private)
    finally:
        private.kill()


def _settings(backend: Backend, ws_port: int) -> Settings:
    return Settings(database_url=backend.database_url, bus_url=backend.bus_url,
                    ws_port=ws_port, webhook_workers=True, revocation_poll_s=0.05,
                    bus_catch_up_interval_s=0.05)


def _leftover_tasks() -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]


def test_a_failed_start_stops_everything_it_started(backend: Backend) -> None:
    """The websocket port is taken: open_runtime raises an error naming RIDECAST_WS_PORT,
    after having stopped the bus, the event log's writer and publisher, the revocation
    watcher, the webhook dispatcher, the simulator's lease renewer and the hub; no task,
    thread or connection survives it."""
    threads_before = set(threading.enumerate())
    holder = _held_port()
    port = holder.getsockname()[1]

    async def attempt() -> list[asyncio.Task[object]]:
        with pytest.raises(OSError, match="RIDECAST_WS_PORT") as failure:
            await asyncio.wait_for(open_runtime(_settings(backend, port)), 60)
        assert f"127.0.0.1:{port}" in str(failure.value)
        return _leftover_tasks()

    try:
        assert asyncio.run(attempt()) == []
    finally:
        holder.close()
    eventually(lambda: set(threading.enumerate()) <= threads_before, timeout=10,
               what="the runtime's threads ended",
               why=lambda: set(threading.enumerate()) - threads_before)
    eventually(lambda: backend.open_connections() == 0, timeout=10,
               what="no connection left open", why=lambda: backend.open_connections())


def test_a_clean_close_leaves_nothing_behind(backend: Backend) -> None:
    """The same runtime started whole and closed: its websocket port is free again and no
    task, thread or connection is left."""
    threads_before = set(threading.enumerate())
    port = free_port()

    async def run() -> list[asyncio.Task[object]]:
        runtime = await asyncio.wait_for(open_runtime(_settings(backend, port)), 60)
        assert runtime.hub is not None and runtime.hub.listener is not None
        await asyncio.wait_for(runtime.close(), 30)
        return _leftover_tasks()

    assert asyncio.run(run()) == []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free again
    eventually(lambda: set(threading.enumerate()) <= threads_before, timeout=10,
               what="the runtime's threads ended",
               why=lambda: set(threading.enumerate()) - threads_before)
    eventually(lambda: backend.open_connections() == 0, timeout=10,
               what="no connection left open", why=lambda: backend.open_connections())


def test_a_part_that_does_not_stop_is_named_and_the_rest_still_stop(
    backend: Backend, caplog: pytest.LogCaptureFixture,
) -> None:
    """A part whose stop never ends (pushed last, so stopped first): the close gives up on
    it after RIDECAST_SHUTDOWN_TIMEOUT_S, names what still runs in the log, and every other
    part still stops (no other task, no connection left)."""
    port = free_port()

    async def run() -> list[str]:
        runtime = await asyncio.wait_for(
            open_runtime(_settings(backend, port).model_copy(
                update={"shutdown_timeout_s": 0.5})), 60)
        stuck = asyncio.create_task(asyncio.Event().wait(), name="a-part-that-never-stops")

        async def stop_stuck() -> None:
            await asyncio.shield(stuck)

        runtime.stack.push_async_callback(stop_stuck)
        await asyncio.wait_for(runtime.close(), 30)
        left = [task.get_name() for task in _leftover_tasks()]
        stuck.cancel()
        return left

    with caplog.at_level("ERROR", logger="ridecast.runtime"):
        assert asyncio.run(run()) == ["a-part-that-never-stops"]
    assert "RIDECAST_SHUTDOWN_TIMEOUT_S" in caplog.text
    assert "a-part-that-never-stops" in caplog.text
    eventually(lambda: backend.open_connections() == 0, timeout=10,
               what="no connection left open", why=lambda: backend.open_connections())


def test_serve_with_its_websocket_port_taken_exits_with_one_line(tmp_path: Path) -> None:
    """``ridecast serve`` whose RIDECAST_WS_PORT is taken exits at once, non-zero, with one
    line naming the setting, and leaves its main port free."""
    holder = _held_port()
    ws_port, port = holder.getsockname()[1], free_port()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port)],
            env={"PATH": "/usr/bin:/bin", "RIDECAST_WS_PORT": str(ws_port),
                 "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"},
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
    finally:
        holder.close()
    assert done.returncode != 0
    assert f"127.0.0.1:{ws_port} (RIDECAST_WS_PORT) is in use" in done.stderr
    assert "Traceback" not in done.stderr
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_serve_whose_redis_refuses_exits_with_one_clear_line(tmp_path: Path) -> None:
    """A start that fails inside open_runtime (the bus's Redis refuses): ``ridecast serve``
    exits non-zero with one line naming RIDECAST_BUS_URL and no traceback (that is for
    RIDECAST_LOG_LEVEL=debug), and leaves its port free."""
    port, dead = free_port(), free_port()
    done = subprocess.run(
        [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port)],
        env={"PATH": "/usr/bin:/bin", "RIDECAST_BUS_URL": f"redis://127.0.0.1:{dead}/0",
             "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"},
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "could not start" in line]
    assert len(errors) == 1, done.stderr
    assert f"the Redis bus at redis://127.0.0.1:{dead}/0 (RIDECAST_BUS_URL) does not answer" in (
        errors[0])
    assert "Traceback" not in done.stderr, done.stderr
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_event_retention_goes_by_the_runtimes_clock(tmp_path: Path) -> None:
    """The retention sweep dates events by ``Runtime.clock``: with the clock moved past
    ``RIDECAST_EVENT_RETENTION_S`` the events go, without a test waiting that long."""
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
                        bus_url="memory://", event_retention_s=3600)

    async def run() -> tuple[int, int]:
        runtime = await asyncio.wait_for(open_runtime(settings), 60)
        try:
            now = time.time()
            runtime.clock = lambda: now
            await runtime.log.append([NewEvent(
                simulation_id=1, org_id=1, owner_id=1, message_type="vehicle_use",
                body=b'{"n":%d}' % n) for n in range(3)])
            kept = await runtime.apply_retention()
            runtime.clock = lambda: now + 3600 + 60
            return kept, await runtime.apply_retention()
        finally:
            await asyncio.wait_for(runtime.close(), 30)

    assert asyncio.run(run()) == (0, 3)
