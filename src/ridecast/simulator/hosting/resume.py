"""What a rebuilt run must not publish again: the events its previous owner already did.

A run taken over is rebuilt from its spec and journal and replays its whole stream; the
events its previous owner published must be dropped, and the others published, so that a
subscriber sees the stream go on with no gap and no duplicate. The previous owner recorded
``Progress`` (how many of the run's events were committed, and the event log id of the last
one) every few seconds and exactly when it handed over. After a crash that record may lag:
the events committed after it are in the event log after ``last_id``, among events other
producers sent to the simulation, and ``AlreadyPublished`` finds them there by content
(``server_ts`` and ``event_id`` aside; the run's events are in order in the log). Pure: the
caller reads the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from ...store.eventlog import EventLog
from ..core.emit import Event

# Fields the event log adds to what the engine produced.
_STAMPED = ("server_ts", "event_id")


@dataclass(frozen=True, slots=True)
class Progress:
    """``count`` events of the run are committed, the last with event log id ``last_id``."""

    count: int = 0
    last_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "last_id": self.last_id}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Progress:
        if not data:
            return cls()
        last = data.get("last_id")
        return cls(int(data.get("count", 0)), None if last is None else int(last))


def as_produced(body: dict[str, Any]) -> dict[str, Any]:
    """A stored event as the engine produced it (what the log stamped taken off)."""
    return {k: v for k, v in body.items() if k not in _STAMPED}


class AlreadyPublished:
    """Filters a rebuilt run's events: the first ``progress.count`` are dropped, then those
    found in ``tail`` (the simulation's logged events after ``progress.last_id``, as
    ``(id, body)``), until the first event that is not there: from it on all are new.

    ``base``: the engine starts from a snapshot taken after the run's first ``base`` events
    (they are not produced again), so only ``progress.count - base`` are dropped by count.
    """

    def __init__(self, progress: Progress,
                 tail: Sequence[tuple[int, dict[str, Any]]] = (), *, base: int = 0) -> None:
        self._skip = max(0, progress.count - base)
        self._tail = [(event_id, as_produced(body)) for event_id, body in tail]
        self._next = 0
        self.count = progress.count
        self.last_id = progress.last_id
        #: Events produced again and dropped (by count and by content).
        self.dropped = 0
        self.done = self._skip == 0 and not self._tail

    def filter(self, events: list[Event]) -> list[Event]:
        """The events of ``events`` not yet published (a suffix of it)."""
        if self.done:
            return events
        k = 0
        n = len(events)
        if self._skip:
            k = min(self._skip, n)
            self._skip -= k
            self.dropped += k
            if self._skip:
                return []
        while k < n:
            found = self._find(events[k])
            if found is None:
                self.done = True
                return events[k:]
            self.dropped += 1
            k += 1
        if not self._tail[self._next:]:
            self.done = True
        return []

    def _find(self, event: Event) -> int | None:
        tail = self._tail
        # Compared as JSON reads it back (a tuple is a list there).
        produced = orjson.loads(orjson.dumps(event))
        for j in range(self._next, len(tail)):
            event_id, body = tail[j]
            if body == produced:
                self._next = j + 1
                self.count += 1
                self.last_id = event_id
                return event_id
        return None


class EventTail(Protocol):
    """The event log as a takeover reads it (the app wires it to ``EventLog``)."""

    async def newest_id(self) -> int:
        """The id of the newest event in the log (0 when empty)."""
        ...

    async def after(self, simulation_id: int, after_id: int) -> list[tuple[int, dict[str, Any]]]:
        """The simulation's events with ids above ``after_id``, in order, as (id, body)."""
        ...


class LogTail:
    """``EventTail`` on the event log."""

    PAGE = 1000

    def __init__(self, log: EventLog) -> None:
        self._log = log

    async def newest_id(self) -> int:
        return await self._log.newest_id()

    async def after(self, simulation_id: int, after_id: int) -> list[tuple[int, dict[str, Any]]]:
        out: list[tuple[int, dict[str, Any]]] = []
        cursor = after_id
        while True:
            page = await self._log.read(after=cursor, limit=self.PAGE,
                                        simulation_id=simulation_id)
            out.extend((event.event_id, orjson.loads(event.body)) for event in page)
            if len(page) < self.PAGE:
                return out
            cursor = page[-1].event_id
