"""Documented limits answer with their documented errors: streams per token and per
user, requests per second per key."""

from __future__ import annotations

import asyncio
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import Server
from tests.waiting import eventually_async


def test_requests_beyond_the_key_rate_get_429(start_server: Any) -> None:
    """With rate 1/s and burst 3, the 4th request at once is 429 with Retry-After."""
    srv: Server = start_server({"RIDECAST_RATE_LIMIT_PER_KEY": "1",
                                "RIDECAST_RATE_LIMIT_BURST": "3"})
    user = srv.create_user()
    other = srv.create_user()
    with srv.client(user) as http:
        statuses = [http.get("/api/v2/simulation").status_code for _ in range(5)]
        refused = http.get("/api/v2/simulation")
    assert statuses[:3] == [200] * 3 and set(statuses[3:]) == {429}
    assert refused.json()["error"]["code"] == "too_many_requests"
    assert int(refused.headers["Retry-After"]) >= 1
    with srv.client(other) as http:  # another key is not affected
        assert http.get("/api/v2/simulation").status_code == 200


def test_streams_beyond_the_token_limit_close_with_4102(start_server: Any) -> None:
    """The 3rd stream of a token limited to 2 closes 4102; after one closes, it works."""
    srv: Server = start_server({"RIDECAST_WS_MAX_STREAMS_PER_TOKEN": "2"})
    user = srv.create_user()
    sim = srv.create_simulation(user)
    url = f"{srv.ws_url}/simulation_events/{sim}?token={srv.token(user)}"

    async def refused_code() -> int | None:
        async with connect(url) as extra:
            try:
                await asyncio.wait_for(extra.recv(), 10)
            except ConnectionClosed:
                return extra.close_code
        return None

    async def live(ws: ClientConnection) -> bool:
        """Whether the server kept ``ws`` open (it answers a ping)."""
        try:
            await asyncio.wait_for(await ws.ping(), 10)
        except ConnectionClosed:
            return False
        return True

    async def both_free_then_refused() -> int | None:
        """With both slots taken again (each stream kept open), the next one's close code;
        None while the server has not yet seen the earlier streams close."""
        async with connect(url) as one, connect(url) as two:
            if not (await live(one) and await live(two)):
                return None
            return await refused_code()

    async def scenario() -> tuple[int | None, int | None]:
        async with connect(url), connect(url) as second:
            code = await refused_code()
            await second.close()
        again = await eventually_async(both_free_then_refused, timeout=30,
                                       what="both slots free again")
        return code, again

    assert asyncio.run(scenario()) == (4102, 4102)
