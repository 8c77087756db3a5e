"""A client's TEXT messages must be UTF-8 (RFC 6455 section 8.1): the pure check, then
against a real server on both ports."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode

from ridecast.hub.incoming import TextCheck
from tests.conftest import Server, free_port
from tests.hub.rawws import (
    BINARY,
    CONT,
    PING,
    PONG,
    TEXT,
    client_frame,
    handshake,
    parse_frames,
    read_frames,
)


def _valid(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@given(st.one_of(st.binary(max_size=64), st.text(max_size=32).map(lambda s: s.encode(
    "utf-8", "surrogatepass"))), st.lists(st.integers(0, 64), max_size=4))
def test_a_message_cut_anywhere_is_accepted_exactly_when_it_is_utf8(
    data: bytes, cuts: list[int],
) -> None:
    """However a message is cut into frames, the check accepts it iff it decodes as UTF-8
    (lone surrogates encoded by surrogatepass included, which UTF-8 forbids)."""
    points = sorted({min(c, len(data)) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    check = TextCheck()
    accepted = True
    for i, piece in enumerate(pieces):
        opcode = Opcode.TEXT if i == 0 else Opcode.CONT
        if not check.accepts(Frame(opcode, piece, fin=i == len(pieces) - 1)):
            accepted = False
            break
    assert accepted == _valid(data)


def test_binary_messages_and_their_continuations_are_not_checked() -> None:
    """BINARY carries any bytes, fragmented or not."""
    check = TextCheck()
    assert check.accepts(Frame(Opcode.BINARY, b"\xff", fin=False))
    assert check.accepts(Frame(Opcode.CONT, b"\xfe", fin=True))


def _closes_with(port: int, path: str, frames: list[bytes]) -> int | None:
    sock = handshake(port, path)
    try:
        sock.sendall(b"".join(frames))
        _frames, code = read_frames(sock)
        return code
    finally:
        sock.close()


def _still_open(port: int, path: str, frames: list[bytes]) -> bool:
    """Send ``frames``, then a ping: open when its pong comes back."""
    sock = handshake(port, path)
    try:
        sock.sendall(b"".join(frames) + client_frame(PING, b"still-there"))
        data = bytearray()
        sock.settimeout(15)
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return False
            data += chunk
            frames_in, code = parse_frames(data)
            if code is not None:
                return False
            if (PONG, b"still-there") in frames_in:
                return True
    finally:
        sock.close()


def test_invalid_utf8_closes_with_1007_on_both_ports(start_server: Any) -> None:
    """A TEXT message that is not UTF-8 (whole, or across fragments) closes the stream with
    1007; valid text cut mid-character and binary junk leave it open."""
    ws_port = free_port()
    srv: Server = start_server({"RIDECAST_WS_PORT": str(ws_port)})
    user = srv.create_user()
    path = f"/simulation_events/?token={srv.token(user)}"
    euro = "€".encode()
    for port in (srv.port, ws_port):
        assert _closes_with(port, path, [client_frame(TEXT, b"ok \xff")]) == 1007
        assert _closes_with(port, path, [client_frame(TEXT, b"\xed\xa0\x80")]) == 1007
        assert _closes_with(port, path, [
            client_frame(TEXT, euro[:2], fin=False), client_frame(CONT, b"x"),
        ]) == 1007
        assert _still_open(port, path, [
            client_frame(TEXT, euro[:1], fin=False), client_frame(CONT, euro[1:]),
            client_frame(BINARY, b"\xff\xfe"), client_frame(TEXT, "café".encode()),
        ])
