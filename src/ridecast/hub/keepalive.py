"""Keepalive pings for every open stream connection, with one timer for the whole hub.

Every ``interval`` seconds each registered connection is pinged, unless its previous ping
went unanswered, in which case it is closed (1011): a peer is reaped between one and two
intervals after it stops answering, as with a per-connection ping timer and a time-out
equal to the interval, without a timer handle or a task per connection.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Pingable(Protocol):
    """A connection the sweep pings."""

    def keepalive(self) -> None:
        """Ping the peer, or close the connection when the last ping was not answered."""


class Keepalive:
    """The hub's ping sweep; connections ``add`` themselves once open and ``discard`` on close."""

    __slots__ = ("_interval", "_members", "_timer")

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._members: dict[Pingable, None] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._members)

    def add(self, member: Pingable) -> None:
        """Ping ``member`` from the next sweep on."""
        self._members[member] = None
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._sweep)

    def discard(self, member: Pingable) -> None:
        """Stop pinging ``member``."""
        self._members.pop(member, None)

    def _sweep(self) -> None:
        self._timer = None
        for member in list(self._members):
            member.keepalive()
        if self._members:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._sweep)

    def stop(self) -> None:
        """Cancel the sweep (the hub is closing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
