"""Revocation takes effect at once on every channel, even when another process revokes.

The CLI runs as its own process against the running server's store, as an operator would:
the server learns of it through the store's revocation epoch (RIDECAST_REVOCATION_POLL_S).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from ridecast.events.examples import example_event
from tests.conftest import Server

WAIT_S = 5.0
"""Generous bound for a close to arrive; the documented poll is 0.5 s."""


def cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "ridecast.cli.main", "users", *args],
        env=server.env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    return result


def token_with(server: Server, auth: tuple[str, str]) -> str:
    with httpx.Client(base_url=server.base_url, auth=auth) as http:
        response = http.get("/api/v2/user/token/")
        response.raise_for_status()
        return str(response.json()["token"])


async def closed_code(ws: ClientConnection) -> int | None:
    """Read until the server closes the stream (bounded); its close code."""
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            await asyncio.wait_for(ws.recv(), deadline - time.monotonic())
    except ConnectionClosed:
        return ws.close_code
    except TimeoutError:
        return None
    return None


def test_cli_revoke_closes_streams_and_refuses_the_key(start_server: Any) -> None:
    """`ridecast users revoke` in another process: 401 on the next request, stream closed 4011."""
    srv: Server = start_server()
    user = srv.create_user()
    sim = srv.create_simulation(user)
    token = srv.token(user)

    async def scenario() -> int | None:
        url = f"{srv.ws_url}/simulation_events/{sim}?token={token}"
        async with connect(url) as ws, httpx.AsyncClient(base_url=srv.base_url,
                                                         auth=user.auth) as http:
            await http.post(f"/api/v2/simulation/{sim}/events",
                            json=example_event("vehicle_use", sim))
            assert json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["data"]
            await asyncio.to_thread(cli, srv, "revoke", user.name)
            return await closed_code(ws)

    assert asyncio.run(scenario()) == 4011
    with srv.client(user) as http:
        assert http.get("/api/v2/simulation").status_code == 401
    with srv.client() as http:
        response = http.get("/api/v2/user/token/",
                            headers={"Authorization": f"Token {user.key}"})
        assert response.status_code == 401


def test_revoking_one_key_keeps_the_user_and_its_other_keys(start_server: Any) -> None:
    """`revoke-key` cuts that key and the tokens issued with it, nothing else."""
    srv: Server = start_server()
    user = srv.create_user()
    sim = srv.create_simulation(user)
    second_key = cli(srv, "key", user.name).stdout.strip()
    keys = json.loads(cli(srv, "keys", user.name, "--json").stdout)
    assert [k["revoked_at"] for k in keys] == [None, None]
    first_id = str(keys[0]["id"])
    token_a = token_with(srv, user.auth)
    token_b = token_with(srv, (user.name, second_key))

    async def scenario() -> tuple[int | None, str]:
        url = f"{srv.ws_url}/simulation_events/{sim}?token="
        async with connect(url + token_a) as ws_a, connect(url + token_b) as ws_b:
            await asyncio.to_thread(cli, srv, "revoke-key", user.name, first_id)
            code = await closed_code(ws_a)
            async with httpx.AsyncClient(base_url=srv.base_url,
                                         auth=(user.name, second_key)) as http:
                response = await http.post(f"/api/v2/simulation/{sim}/events",
                                           json=example_event("vehicle_use", sim))
                assert response.status_code == 201, response.text
            frame = await asyncio.wait_for(ws_b.recv(), WAIT_S)
            return code, str(frame)

    code, frame = asyncio.run(scenario())
    assert code == 4011
    assert json.loads(frame)["message_type"] == "vehicle_use"
    with srv.client(user) as http:
        assert http.get("/api/v2/simulation").status_code == 401
    with httpx.Client(base_url=srv.base_url, auth=(user.name, second_key)) as http:
        assert http.get("/api/v2/simulation").status_code == 200
    listed = {str(k["id"]): k for k in json.loads(cli(srv, "keys", user.name, "--json").stdout)}
    assert listed[first_id]["revoked_at"] is not None
    assert all(k["last_used_at"] is not None for k in listed.values())
    assert cli(srv, "keys", user.name).stdout.count("revoked") == 1
