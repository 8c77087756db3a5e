"""A websocket client on a bare socket, for tests that must send what a library would not
(invalid UTF-8, pings without reading) or read nothing at all."""

from __future__ import annotations

import os
import socket
import struct
import threading
from pathlib import Path

TEXT, CONT, BINARY, CLOSE, PING, PONG = 0x1, 0x0, 0x2, 0x8, 0x9, 0xA


def handshake(port: int, path: str, *, rcvbuf: int | None = None,
              sndbuf: int | None = None) -> socket.socket:
    """A socket with a completed websocket handshake on ``path`` (101 checked)."""
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if sndbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.settimeout(15)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        byte = sock.recv(1)
        assert byte, head
        head += byte
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def client_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """A masked frame, as a client must send it (RFC 6455 section 5.3)."""
    mask = os.urandom(4)
    size = len(payload)
    first = (0x80 if fin else 0) | opcode
    if size < 126:
        head = struct.pack("!BB", first, 0x80 | size)
    elif size < 65536:
        head = struct.pack("!BBH", first, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", first, 0x80 | 127, size)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


Frames = list[tuple[int, bytes]]


def read_frames(sock: socket.socket, timeout: float = 30.0) -> tuple[Frames, int | None]:
    """Read until the server closes (a close frame or the end of the connection): every
    frame as (opcode, payload) and the close code, if a close frame came."""
    sock.settimeout(timeout)
    data = bytearray()
    while True:
        frames, code = parse_frames(data)
        if code is not None:
            return frames, code
        try:
            chunk = sock.recv(1 << 16)
        except (ConnectionResetError, TimeoutError):
            return frames, None
        if not chunk:
            return parse_frames(data)
        data += chunk


def parse_frames(data: bytearray) -> tuple[Frames, int | None]:
    """The complete unmasked frames at the start of ``data``, and the close code if one
    of them is a close frame."""
    frames: list[tuple[int, bytes]] = []
    pos = 0
    while pos + 2 <= len(data):
        opcode, length = data[pos] & 0x0F, data[pos + 1] & 0x7F
        pos += 2
        if length == 126:
            if pos + 2 > len(data):
                break
            (length,) = struct.unpack("!H", data[pos:pos + 2])
            pos += 2
        elif length == 127:
            if pos + 8 > len(data):
                break
            (length,) = struct.unpack("!Q", data[pos:pos + 8])
            pos += 8
        if pos + length > len(data):
            break
        payload = bytes(data[pos:pos + length])
        pos += length
        frames.append((opcode, payload))
        if opcode == CLOSE:
            return frames, struct.unpack("!H", payload[:2])[0]
    return frames, None


def flood_pings(port: int, path: str, sent: list[int], limit: int) -> socket.socket:
    """Send up to ``limit`` bytes of pings on a new stream without ever reading (counted in
    ``sent[0]``); stop when the server stops taking them (a send blocked for 5 s). Returns
    the socket, still open."""
    sock = handshake(port, path, rcvbuf=4096, sndbuf=16384)
    chunk = client_frame(PING, b"p" * 125) * 512
    sock.settimeout(5)
    try:
        while sent[0] < limit:
            sock.sendall(chunk)
            sent[0] += len(chunk)
    except TimeoutError:
        pass
    return sock


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (VmRSS of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class PeakRss:
    """Samples process ``pid``'s resident memory every 10 ms from a thread while in its
    ``with`` block: ``baseline`` (on entry) and ``peak`` (the most seen)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.baseline = self.peak = rss_bytes(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    @property
    def growth(self) -> int:
        return self.peak - self.baseline

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            self._done.wait(0.01)


