"""A cluster on the real Redis and PostgreSQL of the machine: several ``ridecast serve``
processes on one database and one Redis stream (its own key prefix per test)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.privateredis import PrivateRedis
from tests.conftest import (
    REDIS_URL,
    Server,
    free_port,
    launch_server,
    redis_answers,
    service_missing,
)


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Callable[..., Server]]:
    """``node(**env)`` starts one more API node of the same cluster; all stop afterwards."""
    if not redis_answers():
        service_missing(f"no Redis at {REDIS_URL}")
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    nodes: list[Server] = []

    def node(env: dict[str, str] | None = None) -> Server:
        folder = tmp_path / f"node{len(nodes)}"
        folder.mkdir()
        srv = launch_server(folder, {"RIDECAST_BUS_URL": REDIS_URL, "RIDECAST_BUS_PREFIX": prefix,
                                     **(env or {})}, database_url=pg_url)
        nodes.append(srv)
        return srv

    yield node
    for srv in nodes:
        srv.stop()
    import redis

    redis.Redis.from_url(REDIS_URL).delete(f"{prefix}:bus")


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A ``redis-server`` of the test's own, to kill, restart or pause (never 6379's)."""
    server = PrivateRedis(free_port(), tmp_path)
    server.start()
    yield server
    server.kill()
