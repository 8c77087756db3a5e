"""Event bodies a process appended with a webhook, kept for the first attempt of their
delivery, so a claim reads no body back from the log.

Bounded in bytes (``RIDECAST_WEBHOOK_BODY_CACHE_BYTES``), oldest out first; a body taken for
a send is dropped (a retry reads it back from the log).
"""

from __future__ import annotations


class Bodies:
    """Bodies by ``event_id`` (see the module docstring)."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._size = 0
        self._bodies: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._bodies)

    @property
    def size(self) -> int:
        """Bytes held now (at most the limit)."""
        return self._size

    @property
    def mapping(self) -> dict[int, bytes]:
        return self._bodies

    def add(self, event_id: int, body: bytes) -> None:
        if event_id in self._bodies or len(body) > self._limit:
            return
        self._bodies[event_id] = body
        self._size += len(body)
        while self._size > self._limit and self._bodies:
            oldest = next(iter(self._bodies))
            self._size -= len(self._bodies.pop(oldest))

    def drop(self, event_id: int) -> None:
        body = self._bodies.pop(event_id, None)
        if body is not None:
            self._size -= len(body)


__all__ = ["Bodies"]
