"""Bounds on an HTTP connection's head, in bytes and time (issue 32 item 6).

Real sockets against a real ``ridecast serve``: a 64 MB header is answered 431 and the
server's RSS (from /proc) stays bounded; headers that never end and connections that send
nothing are closed by the server within their timeouts; the server keeps answering.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable

import httpx
import pytest

from tests.conftest import Server
from tests.waiting import eventually

ENV = {"RIDECAST_MAX_HEADER_BYTES": "16384", "RIDECAST_HTTP_HEADER_TIMEOUT_S": "1",
       "RIDECAST_HTTP_IDLE_TIMEOUT_S": "1", "RIDECAST_HTTP_BODY_TIMEOUT_S": "1"}
RSS_GROWTH_BOUND = 32 * 1024 * 1024  # SECURITY.md: a refused head costs the server little


def _rss(server: Server) -> int:
    with open(f"/proc/{server.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _closed_by_server(sock: socket.socket, timeout: float = 30.0) -> bool:
    """True once the server closes ``sock`` (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


@pytest.fixture
def guarded(start_server: Callable[..., Server]) -> Server:
    return start_server(ENV)


def _send_huge_header(server: Server, total: int) -> bytes:
    """Send one header of ``total`` bytes in 64 KiB writes until the server answers; the
    answer (read to EOF)."""
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ")
        chunk, sent = b"a" * 65536, 0
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered: stop sending
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        answer = bytearray()
        sock.settimeout(30)
        try:
            while part := sock.recv(65536):
                answer += part
        except ConnectionResetError:
            pass
        return bytes(answer)


def test_a_64_mb_header_is_answered_431_and_costs_no_memory(guarded: Server) -> None:
    """The head is refused once past RIDECAST_MAX_HEADER_BYTES, the connection closed,
    and the server's RSS does not grow with what the client sends."""
    before = _rss(guarded)
    answer = _send_huge_header(guarded, 64 * 1024 * 1024)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"code":"headers_too_large"' in answer
    assert b"connection: close" in answer.lower()
    assert _rss(guarded) - before < RSS_GROWTH_BOUND
    # Just within the limit is served.
    response = httpx.get(f"{guarded.base_url}/healthz", headers={"X-Ok": "a" * 15000})
    assert response.status_code == 200


def test_headers_that_never_end_are_closed(guarded: Server) -> None:
    """A slowloris that drips a byte of header now and then is closed by the header
    timeout (the drip does not rearm it); fifty that stall are closed too."""
    stalled = []
    for _ in range(50):
        sock = socket.create_connection(("127.0.0.1", guarded.port))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        stalled.append(sock)
    with socket.create_connection(("127.0.0.1", guarded.port)) as drip:
        drip.sendall(b"GET /healthz HTTP/1.1\r\nX-Drip: ")
        # The select's wait is the client's drip interval.
        eventually(lambda: _sent_into_a_close(drip, b"a"), timeout=30, step=0,
                   what="the dripping head closed")
    for sock in stalled:
        with sock:
            assert _closed_by_server(sock), "a stalled head was held past 30 s"
    assert httpx.get(f"{guarded.base_url}/healthz").status_code == 200


def _sent_into_a_close(sock: socket.socket, data: bytes) -> bool:
    """Send ``data``, wait up to 0.2 s for an answer: whether the server has closed."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        return True
    return bool(select.select([sock], [], [], 0.2)[0]) and _closed_by_server(sock, 5)


def test_connections_that_send_nothing_are_closed(guarded: Server) -> None:
    """New connections that never send, and a kept-alive one that goes quiet, are closed by
    the idle timeout; bytes that begin no request do not keep one open."""
    silent = [socket.create_connection(("127.0.0.1", guarded.port)) for _ in range(50)]
    with socket.create_connection(("127.0.0.1", guarded.port)) as kept:
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        assert kept.recv(65536).startswith(b"HTTP/1.1 200")
        assert _closed_by_server(kept)
    with socket.create_connection(("127.0.0.1", guarded.port)) as blank:
        # Empty lines before a request line are skipped: they must not keep it open.
        eventually(lambda: _sent_into_a_close(blank, b"\r\n"), timeout=30, step=0,
                   what="the connection sending blank lines closed")
    for sock in silent:
        with sock:
            assert _closed_by_server(sock), "a silent connection was held past 30 s"
    assert httpx.get(f"{guarded.base_url}/healthz").status_code == 200


@pytest.mark.parametrize("path", ["/api/v2/simulation", "/api/v2/simulation/1/events"])
def test_a_body_that_stalls_is_closed(guarded: Server, path: str) -> None:
    """A body that stops short of its Content-Length is closed by the body timeout, on
    the ingest fast path and on uvicorn's; the server goes on serving."""
    user = guarded.create_user()
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n"
                     "Content-Type: application/json\r\n\r\n{".encode())
        assert _closed_by_server(sock), "a stalled body was held past 30 s"
    with guarded.client(user) as http:
        assert http.post("/api/v2/simulation", json={"name": "s"}).status_code == 201


def _read_answer(sock: socket.socket) -> bytes:
    """One whole answer (head and its Content-Length body) from ``sock``."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        assert part, "the server closed a connection in use"
        data += part
    head, _sep, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        part = sock.recv(65536)
        assert part, "the server closed a connection in use"
        body += part
    return head


def test_a_busy_connection_outlives_the_idle_bound_and_is_closed_once_quiet(
    guarded: Server,
) -> None:
    """Requests every 0.2 s for three idle bounds keep a connection open (each request
    moves the deadline; the timer set before fires early and waits again), and once the
    client goes quiet the idle bound closes it."""
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        until = time.monotonic() + 3 * float(ENV["RIDECAST_HTTP_IDLE_TIMEOUT_S"])
        answered = 0
        while time.monotonic() < until:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            assert _read_answer(sock).startswith(b"HTTP/1.1 200")
            answered += 1
            # The producer's pace; a close by the server would show here as readable.
            assert not select.select([sock], [], [], 0.2)[0], "closed while in use"
        assert answered >= 5
        assert _closed_by_server(sock), "a quiet connection was held past 30 s"
