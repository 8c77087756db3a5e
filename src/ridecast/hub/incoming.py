"""What a client sends on a stream, checked as RFC 6455 asks (pure: no I/O).

Streams are one-way: a client's TEXT and BINARY messages carry nothing ridecast reads, so
they are dropped. But a TEXT message must be valid UTF-8, and an endpoint that receives one
that is not must fail the connection with 1007 (RFC 6455 sections 5.6 and 8.1). The
``websockets`` sans-I/O core checks close reasons only (decoding messages is its asyncio
layer's job, which ridecast does not use), so ``TextCheck`` checks messages frame by frame,
fragments included, without keeping more than the few bytes of a character cut between
two frames.
"""

from __future__ import annotations

import codecs

from websockets.frames import Frame, Opcode


class TextCheck:
    """Validates the TEXT messages of one connection as their frames arrive."""

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        # Set while a fragmented TEXT message is being received.
        self._decoder: codecs.IncrementalDecoder | None = None

    def accepts(self, frame: Frame) -> bool:
        """False when ``frame`` makes its message invalid UTF-8 (then close with 1007)."""
        opcode = frame.opcode
        decoder: codecs.IncrementalDecoder
        if opcode is Opcode.TEXT:
            decoder = codecs.getincrementaldecoder("utf-8")()
        elif opcode is Opcode.CONT and self._decoder is not None:
            decoder = self._decoder
        else:  # BINARY, control frames, and continuations of a BINARY message
            return True
        try:
            # The decoded text is dropped at once; a message is at most MAX_INCOMING bytes.
            decoder.decode(frame.data, frame.fin)
        except UnicodeDecodeError:
            self._decoder = None
            return False
        self._decoder = None if frame.fin else decoder
        return True
