"""Dispatch across endpoints and processes: isolation, and ``ridecast worker``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ridecast.cli.receiver import ReceiverThread, Reply
from tests.conftest import Server

from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for


def test_dead_endpoint_does_not_delay_others(fast_server: Server) -> None:
    """While one endpoint hangs on every request, another gets all its events."""
    hanging = Recorder(lambda req, n: Reply(204, delay_s=5))
    healthy = Recorder()
    with ReceiverThread(hanging) as slow, ReceiverThread(healthy) as fast:
        user = fast_server.create_user()
        types = {"messaging_webhook_message_types": ["vehicle_use"]}
        slow_sim = fast_server.create_simulation(
            user, {"messaging_webhook_url": slow.url, **types})
        fast_sim = fast_server.create_simulation(
            user, {"messaging_webhook_url": fast.url, **types})
        with fast_server.client(user) as http:
            post_events(http, slow_sim, [vehicle_use(i) for i in range(300)])
            ids = post_events(http, fast_sim, [vehicle_use(i) for i in range(100)])
            wait_for(lambda: len(healthy.ids()) == 100)
            stuck = deliveries(http, slow_sim, status="succeeded")
    assert healthy.ids() == {f"msg_{i}" for i in ids}
    assert stuck == []


def test_worker_process_delivers_for_a_serve_without_workers(
    start_server: Callable[..., Server], tmp_path: Path,
) -> None:
    """serve with RIDECAST_WEBHOOK_WORKERS=false stores; a ridecast worker on its DB delivers
    what was there when it started, and what is committed while it runs (the outbox watch:
    no bus tells it)."""
    recorder = Recorder()
    server = start_server({"RIDECAST_WEBHOOK_WORKERS": "false"})
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {
            "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": ["vehicle_use"]})
        with server.client(user) as http:
            ids = post_events(http, sim, [vehicle_use(i) for i in range(20)])
            assert {d["status"] for d in deliveries(http, sim)} == {"pending"}
            # A poll of an hour: the first cycle claims what is there at start, and only
            # the outbox watch can tell the worker of the events posted after it.
            env = {**os.environ, "RIDECAST_DATABASE_URL": server.database_url,
                   "RIDECAST_WEBHOOK_ALLOW_PRIVATE": "true", "RIDECAST_LOG_LEVEL": "info",
                   "RIDECAST_WEBHOOK_POLL_INTERVAL_S": "3600"}
            log_path = tmp_path / "worker.log"
            with log_path.open("wb") as log_file:
                worker = subprocess.Popen(
                    [sys.executable, "-m", "ridecast.cli.main", "worker"], env=env,
                    stdout=subprocess.DEVNULL, stderr=log_file)
            try:
                wait_for(lambda: len(recorder.ids()) == 20)
                ids += post_events(http, sim, [vehicle_use(i) for i in range(20, 30)])
                wait_for(lambda: len(recorder.ids()) == 30)
            finally:
                worker.terminate()
                assert worker.wait(15) == 0
    assert recorder.ids() == {f"msg_{i}" for i in ids}
    log = log_path.read_text()
    assert "webhook worker running on sqlite+aiosqlite:///" in log
    assert "(event loop: uvloop)" in log  # as ridecast serve: uvloop where it is installed


def test_worker_log_names_the_store_without_its_password(pg_url: str, tmp_path: Path) -> None:
    """A worker on PostgreSQL prints where it delivers from at the default log level, never
    the password (the machine's PostgreSQL trusts local connections, so any password
    connects)."""
    url = pg_url.replace("postgres@", "postgres:s3cret-pw@", 1)
    env = {k: v for k, v in os.environ.items() if k != "RIDECAST_LOG_LEVEL"}
    env["RIDECAST_DATABASE_URL"] = url
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log_file:
        worker = subprocess.Popen([sys.executable, "-m", "ridecast.cli.main", "worker"],
                                  env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: b"webhook worker running" in log_path.read_bytes())
    finally:
        worker.terminate()
        assert worker.wait(15) == 0
    log = log_path.read_text()
    assert "running on postgresql+asyncpg://postgres:***@127.0.0.1:5432/" in log
    assert "s3cret-pw" not in log
