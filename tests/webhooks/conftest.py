"""A server with short retry schedules and time-outs, shared by the webhook tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Server, launch_server

FAST_ENV = {
    "RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[0.2, 0.2, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]",
    "RIDECAST_WEBHOOK_RETRY_JITTER": "0",
    "RIDECAST_WEBHOOK_TIMEOUT_S": "0.5",
    "RIDECAST_WEBHOOK_LEASE_S": "2",
}


@pytest.fixture(scope="module")
def fast_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose retries come after fractions of a second."""
    srv = launch_server(tmp_path_factory.mktemp("webhooks"), FAST_ENV)
    yield srv
    srv.stop()
