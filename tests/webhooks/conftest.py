"""A server with short retry schedules and time-outs, shared by the webhook tests: one
embedded process, then two cluster nodes on PostgreSQL and Redis whose dispatchers share
the outbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import server_per_backend

FAST_ENV = {
    "RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[0.2, 0.2, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]",
    "RIDECAST_WEBHOOK_RETRY_JITTER": "0",
    "RIDECAST_WEBHOOK_TIMEOUT_S": "0.5",
    "RIDECAST_WEBHOOK_LEASE_S": "2",
}

fast_server = server_per_backend("webhooks", scope="module", env=FAST_ENV)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    return str(request.getfixturevalue("pg_url"))
