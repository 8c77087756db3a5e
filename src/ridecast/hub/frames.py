"""Websocket frames as the server writes them (pure): encoded once, written to every stream.

A server's frames are not masked (RFC 6455 section 5.1), so a TEXT frame carrying a given
payload is the same bytes on every connection: the hub builds it once per event and
writes it, joined with the other frames of a bus batch, to every receiving stream.
"""

from __future__ import annotations

from collections.abc import Iterable

_TEXT_FIN = 0x81


def text_frame(payload: bytes) -> bytes:
    """The wire bytes of one unfragmented, unmasked TEXT frame carrying ``payload``."""
    size = len(payload)
    if size < 126:
        head = bytes((_TEXT_FIN, size))
    elif size < 65536:
        head = bytes((_TEXT_FIN, 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((_TEXT_FIN, 127)) + size.to_bytes(8, "big")
    return head + payload


def text_frames(payloads: Iterable[bytes]) -> bytes:
    """The TEXT frames of ``payloads``, joined for one write."""
    return b"".join(text_frame(payload) for payload in payloads)
