"""Every refusal of a websocket stream: accepted, then closed with its documented code."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx

from ..conftest import Server
from .wsutil import envelope, open_stream, post, refusal


def test_refusal_codes(server: Server) -> None:
    """Missing, malformed or unknown token, unknown type, invisible or unknown simulation,
    malformed path and invalid cursor each close with their own code."""
    user = server.create_user()
    stranger = server.create_user()
    token = server.token(user)
    foreign = server.create_simulation(stranger)
    url = server.ws_url
    cases = {
        f"{url}/simulation_events/": 4001,
        f"{url}/simulation_events/?token=": 4001,
        f"{url}/simulation_events/?token=not-a-uuid": 4002,
        f"{url}/simulation_events/?token={uuid.uuid4()}": 4003,
        f"{url}/simulation_events/no_such_type?token={token}": 4005,
        f"{url}/simulation_events/{foreign}?token={token}": 4006,
        f"{url}/simulation_events/{foreign}/gps_data?token={token}": 4006,
        f"{url}/simulation_events/999999999?token={token}": 4006,
        f"{url}/simulation_events/1/2?token={token}": 4007,
        f"{url}/simulation_events/gps_data/offers/?token={token}": 4007,
        f"{url}/simulation_events/?token={token}&since=abc": 4008,
        f"{url}/simulation_events/?token={token}&since=-5": 4008,
    }

    async def run() -> None:
        for target, code in cases.items():
            got, reason = await refusal(target)
            assert got == code, (target, got, reason)
            assert reason, target

    asyncio.run(run())


def test_authorization_header_is_accepted(server: Server) -> None:
    """The token may come in an Authorization header instead of ?token=."""
    user = server.create_user()
    token = server.token(user)
    sim = server.create_simulation(user)

    async def run() -> None:
        stream = await open_stream(f"{server.ws_url}/simulation_events/{sim}",
                                   additional_headers={"Authorization": f"Bearer {token}"})
        async with httpx.AsyncClient(base_url=server.base_url, auth=user.auth) as http:
            ids = await post(http, sim, [envelope(sim, "vehicle_use")])
        await stream.wait_for(1)
        assert stream.ids == ids
        await stream.close()

    asyncio.run(run())


def test_expired_token_closes_open_stream_and_is_refused(start_server: object) -> None:
    """An open stream is closed with 4004 when its token expires; the token is then refused."""
    srv: Server = start_server({"RIDECAST_TOKEN_TTL_S": "2"})  # type: ignore[operator]
    user = srv.create_user()
    token = srv.token(user)
    issued = time.monotonic()

    async def run() -> None:
        stream = await open_stream(f"{srv.ws_url}/simulation_events/?token={token}")
        assert await stream.wait_closed(timeout=10) == 4004
        assert "token_expired" in stream.close_reason
        assert time.monotonic() - issued >= 1.5
        code, _reason = await refusal(f"{srv.ws_url}/simulation_events/?token={token}")
        assert code == 4004

    asyncio.run(run())


def test_deleted_simulation_closes_its_streams(server: Server) -> None:
    """Deleting a simulation closes its streams with 4006; "all" streams get nothing more."""
    user = server.create_user()
    token = server.token(user)
    sim = server.create_simulation(user)

    async def run() -> None:
        one = await open_stream(f"{server.ws_url}/simulation_events/{sim}?token={token}")
        typed = await open_stream(
            f"{server.ws_url}/simulation_events/vehicle_use/{sim}?token={token}"
        )
        every = await open_stream(f"{server.ws_url}/simulation_events/?token={token}")
        async with httpx.AsyncClient(base_url=server.base_url, auth=user.auth) as http:
            ids = await post(http, sim, [envelope(sim, "vehicle_use")])
            await every.wait_for(1)
            response = await http.delete(f"/api/v2/simulation/{sim}")
            assert response.status_code == 204
            assert await one.wait_closed() == 4006
            assert await typed.wait_closed() == 4006
            refused = await http.post(f"/api/v2/simulation/{sim}/events",
                                      json=envelope(sim, "vehicle_use"))
            assert refused.status_code == 404
        assert one.ids == ids and every.ids == ids
        code, _ = await _refused(f"{server.ws_url}/simulation_events/{sim}?token={token}")
        assert code == 4006
        await every.close()

    asyncio.run(run())


async def _refused(url: str) -> tuple[int | None, str]:
    return await refusal(url)
