"""The stream suites run on both backends: ``server`` is one embedded process, then a pair
of cluster nodes on PostgreSQL and Redis (requests to one node, streams from the other)."""

from __future__ import annotations

from tests.conftest import server_per_backend

server = server_per_backend("hub")
