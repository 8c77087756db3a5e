"""Running a cluster: nodes started together on an empty database, readiness, migrate."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from tests.conftest import REDIS_URL, free_port, redis_answers
from tests.waiting import eventually


def test_two_nodes_started_at_once_on_an_empty_database_both_come_up(
    tmp_path: Path, pg_url: str,
) -> None:
    """Migrations run under an advisory lock: neither node fails on the other's tables."""
    bus = REDIS_URL if redis_answers() else "memory://"
    env = {**os.environ, "RIDECAST_DATABASE_URL": pg_url, "RIDECAST_BUS_URL": bus,
           "RIDECAST_BUS_PREFIX": f"test-{uuid.uuid4().hex[:12]}", "RIDECAST_LOG_LEVEL": "warning"}
    ports = [free_port(), free_port()]
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    procs = []
    for port, log in zip(ports, logs, strict=True):
        with log.open("wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port),
                 "--no-workers"], env=env, stdout=out, stderr=subprocess.STDOUT,
            ))
    try:
        ready = set()

        def both_ready() -> bool:
            for port, proc, log in zip(ports, procs, logs, strict=True):
                assert proc.poll() is None, log.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                        ready.add(port)
            return ready == set(ports)

        eventually(both_ready, timeout=60, step=0.2, what="both nodes ready", why=lambda: ready)
        body = httpx.get(f"http://127.0.0.1:{ports[0]}/readyz").json()
        assert body["status"] == "ready" and body["store"] == "ok"
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=15)
    migrate = subprocess.run([sys.executable, "-m", "ridecast.cli.main", "migrate"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert migrate.returncode == 0 and "current schema" in migrate.stdout, migrate.stderr
