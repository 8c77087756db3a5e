"""The in-process bus: the embedded default, for one ``ridecast serve`` process."""

from __future__ import annotations

from collections.abc import Sequence

from .base import BusMessage, Handler, Handlers, LogReader, Unsubscribe


class MemoryBus:
    """Calls every subscribed handler directly, in publication order."""

    def __init__(self) -> None:
        self._handlers = Handlers()

    def attach_log(self, reader: LogReader) -> None:
        """Nothing to fill: in one process every message is delivered as it is published."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._handlers.clear()

    async def publish(self, messages: Sequence[BusMessage]) -> None:
        self._handlers.hand_out(messages)

    def subscribe(self, handler: Handler) -> Unsubscribe:
        return self._handlers.subscribe(handler)
