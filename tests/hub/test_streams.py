"""Streams against a running server: each path shape delivers exactly what it should."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..conftest import Server, User
from ..waiting import eventually_async
from .wsutil import TYPES, Collector, envelope, open_stream, post


@dataclass
class World:
    """Two organisations, their users and simulations, on the shared server."""

    a1: User
    a2: User
    b1: User
    admin: User
    tokens: dict[str, str]
    sims: dict[int, str]  # simulation id -> organisation label ("A" or "B")


@pytest.fixture(scope="module")
def world(server: Server) -> Iterator[World]:
    a1 = server.create_user()
    a2 = server.create_user(org=a1.org)
    b1 = server.create_user()
    admin = server.create_user(admin=True)
    sims = {server.create_simulation(a1): "A", server.create_simulation(a2): "A",
            server.create_simulation(b1): "B"}
    tokens = {u.name: server.token(u) for u in (a1, a2, b1, admin)}
    yield World(a1, a2, b1, admin, tokens, sims)


def paths_for(sims: list[int]) -> list[str]:
    """Every path shape over these simulations and the test types, both slash forms."""
    out = ["/simulation_events/", "/simulation_events"]
    for kind in TYPES:
        out.append(f"/simulation_events/{kind}")
    for sim in sims:
        out.append(f"/simulation_events/{sim}")
        for kind in TYPES[:2]:
            out += [f"/simulation_events/{sim}/{kind}/", f"/simulation_events/{kind}/{sim}"]
    return out


def expected_ids(path: str, org_of_user: str | None, published: list[tuple[int, int, str]],
                 sims: dict[int, str]) -> set[int]:
    """What a path should deliver: matching simulation and type, visible to the user."""
    parts = [p for p in path.split("/")[2:] if p]
    sim = next((int(p) for p in parts if p.isdigit()), None)
    kind = next((p for p in parts if not p.isdigit()), None)
    return {
        event_id for event_id, s, t in published
        if (sim is None or s == sim) and (kind is None or t == kind)
        and (org_of_user is None or sims[s] == org_of_user)
    }


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False))
def test_every_path_shape_delivers_exactly_its_events(
    server: Server, world: World, rnd: random.Random
) -> None:
    """A random mix over simulations, types and two organisations reaches exactly the
    subscriptions that match it and are allowed to see it."""
    sims = sorted(world.sims)
    plan = [(rnd.choice(sims), rnd.choice(TYPES)) for _ in range(rnd.randint(20, 60))]
    viewers = {world.a2.name: "A", world.b1.name: "B", world.admin.name: None}

    async def run() -> None:
        streams: list[tuple[str, str, Collector]] = []
        for name, org in viewers.items():
            for path in paths_for(sims):
                sim = next((int(p) for p in path.split("/") if p.isdigit()), None)
                if sim is not None and org is not None and world.sims[sim] != org:
                    continue  # refused, tested elsewhere
                collector = await open_stream(
                    f"{server.ws_url}{path}?token={world.tokens[name]}"
                )
                streams.append((name, path, collector))
        published: list[tuple[int, int, str]] = []
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
            for sim, kind in plan:
                owner = world.a1 if world.sims[sim] == "A" else world.b1
                [event_id] = await post_as(http, owner, sim, [envelope(sim, kind)])
                published.append((event_id, sim, kind))
            # Then a marker per simulation and type: a stream has its last marker only
            # after every frame of the plan it was sent, wrong ones included.
            markers: list[tuple[int, int, str]] = []
            for sim in sims:
                owner = world.a1 if world.sims[sim] == "A" else world.b1
                marked = await post_as(http, owner, sim, [envelope(sim, t) for t in TYPES])
                markers += [(i, sim, t) for i, t in zip(marked, TYPES, strict=True)]
        ours = {event_id for event_id, _s, _t in published}
        marker_ids = {event_id for event_id, _s, _t in markers}
        for name, path, collector in streams:
            last = max(expected_ids(path, viewers[name], markers, world.sims))
            await eventually_async(lambda c=collector, m=last: m in c.ids, timeout=10,
                                   what=f"the last marker on {name}'s {path}")
        for name, path, collector in streams:
            want = expected_ids(path, viewers[name], published, world.sims)
            got = [i for i in collector.ids if i not in marker_ids]
            if viewers[name] is None:
                got = [i for i in got if i in ours]  # an admin also sees other tests' events
            assert sorted(got) == got, (name, path)
            assert set(got) == want and len(got) == len(want), (name, path)
            await collector.close()

    asyncio.run(run())


async def post_as(http: httpx.AsyncClient, user: User, sim: int,
                  items: list[dict[str, object]]) -> list[int]:
    http.auth = httpx.BasicAuth(*user.auth)
    return await post(http, sim, items)


def test_frame_is_the_envelope_plus_event_id(server: Server, world: World) -> None:
    """A frame is one TEXT JSON message: the posted envelope plus a string event_id."""
    sim = next(s for s, o in world.sims.items() if o == "A")

    async def run() -> None:
        collector = await open_stream(
            f"{server.ws_url}/simulation_events/{sim}?token={world.tokens[world.a2.name]}"
        )
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
            [event_id] = await post_as(http, world.a1, sim, [envelope(sim, "vehicle_use", 5)])
        await collector.wait_for(1)
        frame = collector.frames[0]
        assert frame["event_id"] == str(event_id)
        assert frame["data"] == {"vehicle_id": 5, "action": "disabled"}
        assert frame["simulation_id"] == sim and "server_ts" in frame
        await collector.close()

    asyncio.run(run())


def test_all_channel_sees_simulations_created_after_connect(server: Server) -> None:
    """The "all" channel delivers events of a simulation created after it opened."""
    user = server.create_user()
    other = server.create_user()
    token = server.token(user)

    async def connect() -> tuple[Collector, Collector]:
        return (await open_stream(f"{server.ws_url}/simulation_events/?token={token}"),
                await open_stream(f"{server.ws_url}/simulation_events/{TYPES[0]}?token={token}"))

    async def run() -> None:
        every, typed = await connect()
        sim = await asyncio.to_thread(server.create_simulation, user)
        foreign = await asyncio.to_thread(server.create_simulation, other)
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
            await post_as(http, other, foreign, [envelope(foreign, TYPES[0])])
            ids = await post_as(http, user, sim, [envelope(sim, t) for t in TYPES])
            # A marker both streams take: any frame they should not get comes before it.
            [marker] = await post_as(http, user, sim, [envelope(sim, TYPES[0], 1)])
        await eventually_async(lambda: marker in every.ids and marker in typed.ids,
                               what="the marker on both streams")
        assert every.ids == [*ids, marker]
        assert typed.ids == [ids[0], marker]
        await every.close()
        await typed.close()

    asyncio.run(run())


def test_dedicated_listener_serves_the_same_paths(start_server: object) -> None:
    """With RIDECAST_WS_PORT, the paths work on that port and on the HTTP port alike."""
    from ..conftest import free_port

    ws_port = free_port()
    srv: Server = start_server({"RIDECAST_WS_PORT": str(ws_port)})  # type: ignore[operator]
    user = srv.create_user()
    token = srv.token(user)
    sim = srv.create_simulation(user)

    async def run() -> None:
        a = await open_stream(f"ws://127.0.0.1:{ws_port}/simulation_events/{sim}?token={token}")
        b = await open_stream(f"{srv.ws_url}/simulation_events/{sim}/?token={token}")
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
            ids = await post_as(http, user, sim, [envelope(sim, t, i) for i, t in enumerate(TYPES)])
        await a.wait_for(3)
        await b.wait_for(3)
        assert a.ids == ids and b.ids == ids
        await a.close()
        await b.close()

    asyncio.run(run())


def test_connect_returns_only_once_subscribed(start_server: object) -> None:
    """An event posted right after connect() returns is delivered, on both ports."""
    from ..conftest import free_port

    ws_port = free_port()
    srv: Server = start_server({"RIDECAST_WS_PORT": str(ws_port)})  # type: ignore[operator]
    user = srv.create_user()
    token = srv.token(user)
    sim = srv.create_simulation(user)

    async def run() -> None:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
            for round_ in range(10):
                base = srv.ws_url if round_ % 2 else f"ws://127.0.0.1:{ws_port}"
                stream = await open_stream(f"{base}/simulation_events/?token={token}")
                ids = await post_as(http, user, sim, [envelope(sim, "vehicle_use", round_)])
                await stream.wait_for(1)
                assert stream.ids == ids
                await stream.close()

    asyncio.run(run())


def test_main_port_streams_write_directly_to_their_connection(server: Server) -> None:
    """Under uvicorn's websockets-sansio protocol, a stream on the main port takes the same
    direct write path as the dedicated port (a uvicorn upgrade that breaks it shows here)."""
    user = server.create_user()
    token = server.token(user)
    sim = server.create_simulation(user)

    def direct_total() -> float:
        # the node that serves the streams (the second one, on the cluster backend)
        node = server.ws_url.replace("ws://", "http://", 1)
        text = httpx.get(f"{node}/metrics", timeout=10).text
        line = next(ln for ln in text.splitlines()
                    if ln.startswith("ridecast_ws_direct_streams_total"))
        return float(line.split()[-1])

    before = direct_total()

    async def run() -> list[int]:
        collector = await open_stream(f"{server.ws_url}/simulation_events/{sim}?token={token}")
        async with httpx.AsyncClient(base_url=server.base_url, auth=user.auth,
                                     timeout=30) as http:
            ids = await post(http, sim, [envelope(sim, "vehicle_use", n) for n in range(20)])
        await collector.wait_for(len(ids))
        await collector.close()
        assert collector.ids == ids
        return ids

    assert len(asyncio.run(run())) == 20
    assert direct_total() >= before + 1


def test_no_stream_negotiates_per_message_deflate(server: Server) -> None:
    """The websockets client (like browsers) offers permessage-deflate; neither port accepts
    it, since it would compress every frame once per connection and cost a zlib context of
    tens of KiB per stream."""
    user = server.create_user()
    token = server.token(user)
    sim = server.create_simulation(user)

    async def extensions() -> tuple[str, str | None]:
        from websockets.asyncio.client import connect

        async with connect(f"{server.ws_url}/simulation_events/{sim}?token={token}") as ws:
            assert ws.request is not None and ws.response is not None
            return (ws.request.headers.get("Sec-WebSocket-Extensions", ""),
                    ws.response.headers.get("Sec-WebSocket-Extensions"))

    offered, accepted = asyncio.run(extensions())
    assert "permessage-deflate" in offered
    assert accepted is None
