"""The simulator's API suite runs on both backends: ``server`` is one embedded process, then
a pair of cluster nodes on PostgreSQL and Redis (requests to one node, streams from the
other, the run leased in PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import BACKENDS, Server, launch_backend, stop_backend


@pytest.fixture(scope="session", params=BACKENDS)
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The shared server of the simulator API tests, once per backend."""
    srv = launch_backend(request.param, tmp_path_factory.mktemp(f"sim-{request.param}"))
    yield srv
    stop_backend(srv)
