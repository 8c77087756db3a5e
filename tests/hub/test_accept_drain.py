"""Closing a listening socket without resetting what the kernel queued (``accept_drain``),
on real sockets on loopback."""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette

from ridecast.hub.accept_drain import (
    accept_queue_length,
    drain_accept_queues,
    refuse_new_connections,
    unread_bytes,
)
from ridecast.hub.asgi import ShutdownFirstServer, unread_requests
from tests.waiting import eventually, eventually_async

pytestmark = pytest.mark.skipif(sys.platform != "linux",
                                reason="socket filters and TCP_INFO are Linux's")

QUEUED = 8
TCP_SYN_SENT = 2  # linux/tcp_states.h


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock
    sock.close()


def _queue_requests(listening: socket.socket) -> list[socket.socket]:
    """``QUEUED`` connections the kernel has completed, each with a request sent, none
    accepted yet."""
    port = listening.getsockname()[1]
    clients = []
    for _ in range(QUEUED):
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        client.sendall(b"ping\n")
        clients.append(client)
    assert accept_queue_length(listening) == QUEUED
    return clients


def _answer(client: socket.socket) -> bytes:
    """What the server sent before closing; b"reset" for a reset."""
    try:
        data = b""
        while chunk := client.recv(64):
            data += chunk
        return data
    except ConnectionResetError:
        return b"reset"
    finally:
        client.close()


async def _pong(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readline()
    writer.write(b"pong\n")
    await writer.drain()
    writer.close()


async def test_a_listener_closed_with_connections_queued_resets_them(
        listening: socket.socket) -> None:
    """What the module is for: the kernel's behaviour without it."""
    clients = _queue_requests(listening)
    server = await asyncio.start_server(_pong, sock=listening, start_serving=False)
    server.close()
    answers = await asyncio.gather(*(asyncio.to_thread(_answer, c) for c in clients))
    assert set(answers) <= {b"reset", b""}, answers


async def test_a_drained_listener_answers_every_queued_connection_and_refuses_new_ones(
        listening: socket.socket) -> None:
    clients = _queue_requests(listening)
    server = await asyncio.start_server(_pong, sock=listening, start_serving=False)
    await server.start_serving()
    assert await drain_accept_queues(server.sockets, timeout_s=10) == 0
    # A connection attempt after the drain began is not completed, and is refused once the
    # listener is closed: nothing was sent on it, so a balancer may pass it on.
    late = socket.socket()
    late.setblocking(False)
    assert late.connect_ex(listening.getsockname()) == errno.EINPROGRESS
    server.close()
    answers = await asyncio.gather(*(asyncio.to_thread(_answer, c) for c in clients))
    assert answers == [b"pong\n"] * QUEUED

    def refused() -> int:
        late.settimeout(10)
        try:
            late.recv(1)
        except ConnectionRefusedError:
            return 0
        except OSError as exc:
            return exc.errno or -1
        return -1
    assert await asyncio.to_thread(refused) == 0
    late.close()


def test_the_filter_drops_only_connection_attempts(listening: socket.socket) -> None:
    assert refuse_new_connections(listening)
    late = socket.socket()
    late.setblocking(False)
    assert late.connect_ex(listening.getsockname()) == errno.EINPROGRESS

    def syn_sent_again() -> bool:
        """The client's SYN went unanswered and was sent again (TCP_INFO: state, then
        retransmits): the listener dropped it."""
        info = late.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
        assert info[0] == TCP_SYN_SENT, info[0]  # never ESTABLISHED
        return info[2] >= 1

    eventually(syn_sent_again, timeout=10, what="the client's SYN sent again")
    late.close()
    assert accept_queue_length(listening) == 0
    # Neither applies to a socket that is not TCP.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        assert not refuse_new_connections(unix)
        assert accept_queue_length(unix) is None


def test_unread_requests_counts_idle_http_connections_with_bytes_waiting() -> None:
    a, b = socket.socketpair()
    with a, b:
        def connection(cycle: Any) -> Any:
            transport = SimpleNamespace(get_extra_info=lambda name: b if name == "socket"
                                        else None)
            return SimpleNamespace(cycle=cycle, transport=transport)

        idle = connection(None)
        done = connection(SimpleNamespace(response_complete=True))
        busy = connection(SimpleNamespace(response_complete=False))
        stream = SimpleNamespace(transport=idle.transport)  # no HTTP cycle: a websocket
        assert unread_requests([idle, done, busy, stream]) == 0
        a.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert unread_bytes(b) == 18
        assert unread_requests([idle, done, busy, stream]) == 2
        b.recv(64)
        assert unread_requests([idle, done, busy, stream]) == 0


async def test_a_server_handed_a_shared_socket_leaves_it_accepting(
        listening: socket.socket) -> None:
    """uvicorn's workers share one listening socket, and an inherited one outlives the
    process: the filter, which belongs to the socket, must not be attached to it."""
    app = Starlette()
    server = ShutdownFirstServer(uvicorn.Config(app, lifespan="off", log_level="warning"), app)
    serving = asyncio.create_task(server.serve(sockets=[listening.dup()]))
    await eventually_async(lambda: server.started, what="the server started")
    server.should_exit = True
    await asyncio.wait_for(serving, 30)
    # The socket this test holds still completes connections (a filter would drop them).
    client = await asyncio.wait_for(
        asyncio.open_connection(*listening.getsockname()), 10)
    client[1].close()
