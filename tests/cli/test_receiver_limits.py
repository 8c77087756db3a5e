"""``ridecast receiver`` bounds bodies both ways alike and times out (issue 32 item 9).

A real ``ridecast receiver`` process on a real socket: a chunked body over MAX_BODY_BYTES
is answered 413 like a Content-Length one, and the process's RSS (from /proc) stays bounded;
connections that stall in their head or body, or send nothing, are closed by ``--timeout``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ridecast.cli.receiver import MAX_BODY_BYTES, MAX_CHUNKS
from tests.conftest import free_port
from tests.waiting import eventually

RSS_GROWTH_BOUND = MAX_BODY_BYTES * 3  # one body at most in flight, with copies


@pytest.fixture
def receiver() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ridecast.cli.main", "receiver", "--port", str(port),
         "--timeout", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening() -> bool:
        assert process.poll() is None, "the receiver exited"
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True

    eventually(listening, timeout=30, ignoring=(OSError,), what="the receiver started")
    yield port, process
    process.terminate()
    process.wait(15)


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _answer(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    answer = b""
    try:
        while part := sock.recv(65536):
            answer += part
    except ConnectionResetError:
        pass
    return answer


def test_a_chunked_body_is_bounded_like_a_content_length_one(
    receiver: tuple[int, subprocess.Popen[bytes]],
) -> None:
    """200 MiB of chunks: 413 once past MAX_BODY_BYTES, and the receiver's memory stays
    bounded; a declared Content-Length over it is a 413 too, before any body is read."""
    port, process = receiver
    before = _rss(process.pid)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (1024 * 1024, b"a" * 1024 * 1024)
        for _ in range(200):
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:100]
    assert _rss(process.pid) - before < RSS_GROWTH_BOUND
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
                     % (MAX_BODY_BYTES + 1))
        assert _answer(sock).startswith(b"HTTP/1.1 413 ")
    with socket.create_connection(("127.0.0.1", port)) as sock:  # still serving
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"2\r\n{}\r\n0\r\n\r\n")
        sock.settimeout(30)
        assert sock.recv(65536).startswith(b"HTTP/1.1 204 ")


def test_trailer_fields_are_read_and_bounded(
    receiver: tuple[int, subprocess.Popen[bytes]],
) -> None:
    """Trailer fields after the last chunk are read up to the empty line, so the request
    pipelined behind them is answered too; trailers over MAX_HEADER_BYTES close the
    connection without holding them."""
    port, _process = receiver
    chunked = b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(chunked + b"X-Checksum: 1\r\nX-Other: 2\r\n\r\n"
                     b"POST /next HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
        sock.settimeout(30)
        answers = b""
        while answers.count(b"HTTP/1.1 204 ") < 2:
            part = sock.recv(65536)
            assert part, f"closed after {answers!r}"
            answers += part
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(chunked + b"X-Pad: %s\r\n" % (b"a" * 1000) * 70)
        assert _answer(sock) == b""


@pytest.mark.parametrize("sent", [
    b"",  # nothing at all
    b"POST / HTTP/1.1\r\nHost: t\r\nX-Slow: ",  # a head that never ends
    b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{",  # a body that stalls
    b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
])
def test_stalled_connections_are_closed(
    receiver: tuple[int, subprocess.Popen[bytes]], sent: bytes,
) -> None:
    """The receiver closes a connection whose head or body does not arrive in --timeout."""
    port, _process = receiver
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(sent)
        sock.settimeout(30)
        with contextlib.suppress(ConnectionResetError):  # a reset is a close too
            assert sock.recv(65536) == b""


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CHUNK_CPU_BOUND_S = 1.0
"""Most CPU the receiver may spend on one sender of tiny chunks (SECURITY.md)."""


def test_tiny_chunks_are_bounded_in_count(
    receiver: tuple[int, subprocess.Popen[bytes]],
) -> None:
    """One-byte chunks, more than MAX_CHUNKS of them: 413 after MAX_CHUNKS, whatever the
    bytes, with the receiver's CPU for it bounded (it spent seconds on millions before)."""
    port, process = receiver
    before = _cpu_s(process.pid)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        burst = b"1\r\na\r\n" * 16_384
        for _ in range(MAX_CHUNKS // 16_384 * 4):
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(burst)
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:100]
    assert _cpu_s(process.pid) - before < CHUNK_CPU_BOUND_S
