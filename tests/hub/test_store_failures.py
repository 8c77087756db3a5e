"""When the store fails under a websocket, the client gets a close code it can act on.

Before: a failed replay closed with 1006 and no code, and a failed token lookup became a
handshake 500. Now both close with 4101 service_unavailable (reconnect with back-off).
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import Server


def _sql(srv: Server, statement: str) -> None:
    with sqlite3.connect(srv.database_url.split("///", 1)[1]) as db:
        db.execute(statement)


async def _close_code(url: str) -> int | None:
    async with connect(url) as ws:
        try:
            await asyncio.wait_for(ws.recv(), 10)
        except ConnectionClosed:
            return ws.close_code
    return None


def test_a_replay_that_fails_closes_with_4101(start_server: Any) -> None:
    """since= while the log cannot be read: close 4101 with a reason, not 1006."""
    srv: Server = start_server()
    user = srv.create_user()
    sim = srv.create_simulation(user)
    token = srv.token(user)
    _sql(srv, "ALTER TABLE events RENAME TO events_away")
    try:
        url = f"{srv.ws_url}/simulation_events/{sim}?token={token}&since=0"
        assert asyncio.run(_close_code(url)) == 4101
    finally:
        _sql(srv, "ALTER TABLE events_away RENAME TO events")
    assert "replaying since=0 failed" in srv.logs()


def test_a_token_lookup_that_fails_closes_with_4101(start_server: Any) -> None:
    """A store error while authorising: the handshake completes and closes 4101."""
    srv: Server = start_server()
    user = srv.create_user()
    sim = srv.create_simulation(user)
    token = srv.token(user)
    _sql(srv, "ALTER TABLE tokens RENAME TO tokens_away")
    try:
        url = f"{srv.ws_url}/simulation_events/{sim}?token={token}"
        assert asyncio.run(_close_code(url)) == 4101
    finally:
        _sql(srv, "ALTER TABLE tokens_away RENAME TO tokens")
    assert "authorising a websocket failed" in srv.logs()
