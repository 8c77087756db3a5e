"""The SDK pointed at a cluster: two real ``ridecast serve`` nodes (PostgreSQL + Redis),
each restarted in turn (SIGTERM, then started again on its port) while a client posts
events and streams them. REST calls fail over to the node that answers, the stream resumes
on the other node with ``since=`` at once, and it sees every stored event once, in order:
no gap, no duplicate, and no wait for the restarted node to come back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ridecast.client import AsyncClient, Backoff, Client, ClientError, StreamStatus, TransportError
from ridecast.events.examples import example_event
from tests.conftest import (
    CrossNodeServer,
    Server,
    User,
    drop_cluster_pair,
    free_port,
    launch_cluster_pair,
    launch_server,
)

# The back-off a stream would use on one node; failing over must not need it.
SLOW = Backoff(initial=5.0, maximum=5.0, jitter=0.0)


class Cluster:
    """The two nodes of a cluster pair, either of which can be restarted on its port."""

    def __init__(self, pair: CrossNodeServer, tmp: Path) -> None:
        assert pair.other is not None
        self.pair = pair
        self.nodes: list[Server] = [pair, pair.other]
        self.tmp = tmp
        self.restarts = 0

    @property
    def urls(self) -> list[str]:
        return [node.base_url for node in self.nodes]

    def stop(self, index: int) -> None:
        # Server.stop, not CrossNodeServer.stop: that one stops both nodes.
        Server.stop(self.nodes[index])

    def start(self, index: int) -> None:
        old = self.nodes[index]
        self.restarts += 1
        folder = self.tmp / f"restart{self.restarts}"
        folder.mkdir()
        self.nodes[index] = launch_server(folder, old.env, database_url=old.database_url,
                                          port=old.port)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    pair = launch_cluster_pair(tmp_path)
    nodes = Cluster(pair, tmp_path)
    try:
        yield nodes
    finally:
        for node in nodes.nodes:
            Server.stop(node)
        drop_cluster_pair(pair)


async def test_a_client_of_two_nodes_sees_no_gap_across_restarts(cluster: Cluster) -> None:
    """Node A (the stream's) stops: events posted meanwhile (through B) reach the stream
    before A is back; then B stops and A serves alone. The stream's ids equal the stored
    history exactly, and every acknowledged post is in it."""
    user = await asyncio.to_thread(cluster.nodes[0].create_user)
    statuses: list[StreamStatus] = []
    async with AsyncClient(cluster.urls, user=user.name, key=user.key, timeout=10) as client:
        sim = await client.create_simulation("failover")
        connected = asyncio.Event()

        def on_status(status: StreamStatus) -> None:
            statuses.append(status)
            if status.kind == "connected":
                connected.set()

        stream = client.stream(sim.id, backoff=SLOW, on_status=on_status)
        received: list[str] = []
        arrived = asyncio.Condition()

        async def consume() -> None:
            async for event in stream:
                assert event.event_id is not None
                async with arrived:
                    received.append(event.event_id)
                    arrived.notify_all()

        acknowledged: list[str] = []
        refused: list[str] = []
        stop_posting = asyncio.Event()

        async def post_steadily() -> None:
            n = 0
            while not stop_posting.is_set():
                n += 1
                try:
                    acknowledged.extend(await client.post_events(
                        sim.id, example_event("vehicle_use", sim.id)))
                except ClientError as exc:  # sent, then the node went away: unknown
                    refused.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.02)

        async def sees(event_id: str) -> None:
            async with arrived:
                await asyncio.wait_for(
                    arrived.wait_for(lambda: event_id in received), timeout=30)

        async def flowing(more: int = 5) -> None:
            """Until ``more`` events of the steady poster have reached the stream."""
            mark = len(received)
            async with arrived:
                await asyncio.wait_for(
                    arrived.wait_for(lambda: len(received) >= mark + more), timeout=30)

        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(connected.wait(), 30)
        assert statuses[-1].node.endswith(f":{cluster.nodes[0].port}")
        poster = asyncio.create_task(post_steadily())
        try:
            for down, up in ((0, 1), (1, 0)):
                await flowing()  # events flow through the node about to stop
                await asyncio.to_thread(cluster.stop, down)
                # While it is down: a post goes to the other node, and the stream has it.
                ids = await client.post_events(sim.id, example_event("vehicle_use", sim.id))
                acknowledged.extend(ids)
                await sees(ids[-1])
                last = [s for s in statuses if s.kind == "connected"][-1]
                assert last.node.endswith(f":{cluster.nodes[up].port}")
                await asyncio.to_thread(cluster.start, down)
            await flowing()
        finally:
            stop_posting.set()
            await poster
        final = await client.post_events(sim.id, example_event("vehicle_use", sim.id))
        acknowledged.extend(final)
        await sees(final[-1])
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer
        await stream.aclose()
        history = [event.event_id async for event in client.history(sim.id)]

    assert received == history, "the stream has a gap, a duplicate or a reordering"
    assert set(acknowledged) <= set(history)
    # The stream never had to wait for a node: each drop moved on at once.
    assert all(s.delay == 0 for s in statuses if s.kind == "waiting"), statuses
    assert len(refused) <= 2, refused  # at most a post in flight at each of the two stops


class Resetter:
    """A real TCP server that reads a request's first bytes and closes without answering:
    a node that died after the request was sent."""

    def __init__(self) -> None:
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if await reader.read(1):
                self.requests += 1
            writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *_exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def test_rest_calls_fail_over_only_when_it_is_safe(server: Server) -> None:
    """A node that refuses connections is skipped by every call, POST included (nothing was
    sent). A node that takes the request and dies: a GET goes on to the next node, a POST
    raises TransportError and is not sent again (it might have been stored)."""
    user = await asyncio.to_thread(server.create_user)
    refused = f"http://127.0.0.1:{free_port()}"
    async with AsyncClient([refused, server.base_url], user=user.name, key=user.key) as client:
        sim = await client.create_simulation("refused first")
        ids = await client.post_events(sim.id, example_event("vehicle_use", sim.id))
        assert len(ids) == 1
    resetter = Resetter()
    async with resetter as broken:
        nodes = [broken, server.base_url]
        async with AsyncClient(nodes, user=user.name, key=user.key) as client:
            assert [s.id for s in await client.list_simulations()] == [sim.id]
        async with AsyncClient(nodes, user=user.name, key=user.key) as client:
            with pytest.raises(TransportError):
                await client.post_events(sim.id, example_event("vehicle_use", sim.id))
        history = await asyncio.to_thread(_history_ids, server, user, sim.id)
        assert resetter.requests == 2  # the GET, then the POST
    assert history == ids  # the POST that met the broken node was not resent elsewhere


def _history_ids(server: Server, user: User, simulation_id: int) -> list[str]:
    with Client(server.base_url, user=user.name, key=user.key) as client:
        return [event.event_id or "" for event in client.history(simulation_id)]
