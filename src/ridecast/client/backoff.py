"""When a stream reconnects, and how long it waits first (pure, no I/O).

The close-code ranges come from the server's error table (Pusher's convention):
4000-4099 "do not reconnect", 4100-4199 "reconnect with back-off", 1001 "server going
away". Token problems (4003 unknown, 4004 expired) are the one do-not-reconnect case the
client can fix itself: it fetches a fresh token and connects again at once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# Close codes with which the server says the token is the problem (errors.ERRORS).
TOKEN_CLOSE_CODES = frozenset({4003, 4004})

# RFC 6455 codes meaning "this client sent something the server cannot accept": sending the
# same thing again would fail the same way, so reconnecting would only loop.
_PROTOCOL_FAULTS = frozenset({1002, 1003, 1007, 1008, 1009, 1010})


class Action(enum.Enum):
    """What a stream does after its connection ends."""

    RECONNECT = "reconnect"  # wait (back-off with jitter), then connect again with since=
    REFRESH_TOKEN = "refresh_token"  # get a fresh token, then connect again at once
    STOP = "stop"  # raise a typed exception: reconnecting cannot help


def classify_close(code: int | None) -> Action:
    """The action for a close code; ``None`` means the connection dropped without one."""
    if code is None:
        return Action.RECONNECT
    if code in TOKEN_CLOSE_CODES:
        return Action.REFRESH_TOKEN
    if 4000 <= code <= 4099:
        return Action.STOP
    if code in _PROTOCOL_FAULTS:
        return Action.STOP
    # 1000/1001/1005/1006/1011-1014, 4100-4199 and codes this client does not know yet:
    # back off and try again, resuming from the last event_id so nothing is lost.
    return Action.RECONNECT


def classify_handshake(status: int) -> Action:
    """The action when the server refuses the websocket upgrade with an HTTP status."""
    if status == 401:
        return Action.REFRESH_TOKEN
    if status in (408, 425, 429) or status >= 500:
        return Action.RECONNECT
    return Action.STOP


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential back-off with jitter: ``delay(n)`` before the n-th retry in a row (from 0).

    The ceiling grows ``initial * factor**n`` up to ``maximum``; ``jitter`` is the share of the
    ceiling that is random (1.0 = "full jitter", which spreads a crowd of clients that all lost
    the same server, so they do not come back in one wave).
    """

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < self.initial or self.factor < 1:
            raise ValueError("need 0 <= initial <= maximum and factor >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def ceiling(self, attempt: int) -> float:
        """The longest wait before retry ``attempt`` (0-based)."""
        delay = self.initial
        for _ in range(max(0, attempt)):
            delay *= self.factor
            if delay >= self.maximum:
                return self.maximum
        return min(delay, self.maximum)

    def delay(self, attempt: int, rand: float) -> float:
        """The wait before retry ``attempt``; ``rand`` is uniform in [0, 1)."""
        ceiling = self.ceiling(attempt)
        return ceiling * (1 - self.jitter) + ceiling * self.jitter * rand

