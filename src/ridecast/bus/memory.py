"""The in-process bus: the embedded default, for one ``ridecast serve`` process."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .base import BusMessage, Handler, LogReader, Unsubscribe

log = logging.getLogger(__name__)


class MemoryBus:
    """Calls every subscribed handler directly, in publication order."""

    def __init__(self) -> None:
        self._handlers: list[Handler] = []

    def attach_log(self, reader: LogReader) -> None:
        """Nothing to fill: in one process every message is delivered as it is published."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._handlers.clear()

    async def publish(self, messages: Sequence[BusMessage]) -> None:
        for handler in tuple(self._handlers):
            try:
                handler(messages)
            except Exception:  # one broken consumer must not stop the others
                log.exception("bus handler %r failed", handler)

    def subscribe(self, handler: Handler) -> Unsubscribe:
        self._handlers.append(handler)

        def unsubscribe() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)

        return unsubscribe
