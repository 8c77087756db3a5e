"""Closing a listening socket without resetting the connections the kernel already queued.

When a server closes its listening socket, the kernel resets every connection that has
completed its handshake but was not yet accepted. Behind a balancer that is a failed
request: nginx connected, sent a POST, and got a reset, which it must not retry elsewhere
(the node might have read it). Connection attempts that come *after* the close are refused
before anything is sent, and the balancer passes them to the next node.

So before the close, on Linux, ``drain_accept_queues`` attaches a socket filter to each
listening TCP socket that drops new connection attempts (a TCP segment with SYN and no ACK;
segments that complete a handshake already under way still pass), and lets the server's
event loop accept what is queued and read those requests: until the kernel reports the
queue empty (``TCP_INFO``) and no accepted connection holds a request not yet read (a server
that closes its idle connections at shutdown would reset those too), or until
``timeout_s``. A dropped attempt is sent again by its client about a second later and then
finds the socket closed: refused, nothing sent. Elsewhere, or on sockets this does not
understand (Unix sockets, a kernel without socket filters), nothing changes: the close resets
what is queued. The filter belongs to the socket, not to this process: never attach it to a
listening socket that other processes share, or will inherit.
"""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import socket
import struct
import termios
import time
from collections.abc import Callable, Iterable
from typing import Any

SO_ATTACH_FILTER = 26  # Linux; not in the socket module
#: The classic BPF program: load the TCP flags byte (offset 13 of the TCP header, where a
#: socket filter on a TCP socket starts); ACK set: keep the whole segment; else (a SYN that
#: starts a connection): drop it.
_BPF_LD_B_ABS, _BPF_JSET_K, _BPF_RET_K = 0x30, 0x45, 0x06
_DROP_NEW_CONNECTIONS = (
    (_BPF_LD_B_ABS, 0, 0, 13),
    (_BPF_JSET_K, 0, 1, 0x10),
    (_BPF_RET_K, 0, 0, 0xFFFFFFFF),
    (_BPF_RET_K, 0, 0, 0),
)
_TCP_INFO_LEN = 104
_TCPI_UNACKED = 24  # for a listening socket: connections queued for accept()
POLL_S = 0.005


def _is_tcp(sock: Any) -> bool:
    return bool(sock.family in (socket.AF_INET, socket.AF_INET6)
                and sock.type == socket.SOCK_STREAM)


def refuse_new_connections(sock: Any) -> bool:
    """Drop new connection attempts to the listening ``sock`` from now on; False when this
    platform or socket cannot (nothing changed)."""
    if not _is_tcp(sock):
        return False
    code = ctypes.create_string_buffer(
        b"".join(struct.pack("HBBI", *op) for op in _DROP_NEW_CONNECTIONS))
    program = struct.pack("HL", len(_DROP_NEW_CONNECTIONS), ctypes.addressof(code))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, program)
    except OSError:
        return False
    return True


def accept_queue_length(sock: Any) -> int | None:
    """Connections queued on the listening ``sock`` and not yet accepted (Linux); None when
    unknown."""
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is None or not _is_tcp(sock):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, _TCP_INFO_LEN)
    except OSError:
        return None
    if len(info) < _TCPI_UNACKED + 4:
        return None
    queued: int = struct.unpack_from("I", info, _TCPI_UNACKED)[0]
    return queued


def unread_bytes(sock: Any) -> int:
    """Bytes received on a connected ``sock`` and not yet read by the application (0 when
    unknown)."""
    try:
        buffer = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    count: int = struct.unpack("i", buffer)[0]
    return count


async def drain_accept_queues(sockets: Iterable[Any], timeout_s: float = 1.0,
                              unread: Callable[[], int] = lambda: 0) -> int:
    """Refuse new connections on ``sockets`` and wait (at most ``timeout_s``) until the event
    loop has accepted every connection queued on them and ``unread()`` (connections the
    server has accepted but whose request it has not read yet) is 0; returns what is left
    (0, or what remained when time ran out; a queue that cannot be read counts 0)."""
    watched = [sock for sock in sockets if refuse_new_connections(sock)]
    deadline = time.monotonic() + timeout_s
    while True:
        left = sum(accept_queue_length(sock) or 0 for sock in watched) + unread()
        if left == 0 or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(POLL_S)  # the loop's accept and read callbacks run meanwhile
