"""A server with short retry schedules and time-outs, shared by the webhook tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import BACKENDS, Server, launch_backend, stop_backend

FAST_ENV = {
    "RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[0.2, 0.2, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]",
    "RIDECAST_WEBHOOK_RETRY_JITTER": "0",
    "RIDECAST_WEBHOOK_TIMEOUT_S": "0.5",
    "RIDECAST_WEBHOOK_LEASE_S": "2",
}


@pytest.fixture(scope="module", params=BACKENDS)
def fast_server(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose retries come after fractions of a second: one embedded process, then
    two cluster nodes on PostgreSQL and Redis whose dispatchers share the outbox."""
    srv = launch_backend(request.param, tmp_path_factory.mktemp(f"webhooks-{request.param}"),
                         FAST_ENV)
    yield srv
    stop_backend(srv)
