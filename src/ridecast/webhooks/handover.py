"""New unordered deliveries leased, in the transaction that writes them, to a running unit.

A claim leases due rows with an UPDATE of each row, in a transaction of its own, behind
SQLite's one writer. For the rows this process appends while one of its unordered units of
the same URL is running, that transaction is not needed: the event log writes them already
``delivering``, under that unit's claim token and lease (``EventLog``'s ``Lessor``), and
hands them to the unit after the commit, with the body it holds. They take no slot (the
token is the unit's; ``webhook_concurrency_per_endpoint`` counts tokens), and a process
that dies before sending them leaves them leased, due again when the lease runs out, like
claimed rows. Under ``bench/webhooks.py``'s burst this is every delivery but the first
commit's.

Ordered rows are never handed over: a lane's unit holds 64 rows at a time, and a new row
given to it would pass the rows still pending in the store.

``Handover`` owns the registry of running unordered units (``LooseUnit``) that take rows, and
the choice of unit (the least loaded of the URL's, in turn). The dispatcher opens a unit's
entry when its task starts and closes it when the task ends; a unit waits, before it ends,
for the rows reserved for it and not yet committed (``LooseUnit.incoming``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..metrics import WEBHOOK_HANDED_OVER
from ..store.eventlog import Leases, NewEvent
from .outbox import Job, Unit


@dataclass(slots=True, eq=False)
class LooseUnit:
    """A running unordered unit: its token and URL, the deliveries its task has still to
    send (``todo``), its lease, and the rows reserved for it and not yet committed."""

    token: str
    url: str
    todo: deque[Job]
    lease_until: float
    sent: int = 0
    incoming: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    # A renewal of the lease is under way (nothing is reserved meanwhile); rows arrived
    # under a lease older than ``lease_until``, or during a renewal: renew before the next
    # send, these rows with the rest.
    renewing: bool = False
    stale: bool = False

    @property
    def load(self) -> int:
        return len(self.todo) + self.incoming


class Handover:
    """Reserves new unordered deliveries for running units and hands them over after the
    commit; see the module docstring.

    ``max_rows``: the most rows one unit sends in its life (the dispatcher's
    ``UNIT_MAX_ROWS``), counted with what it holds and what is reserved for it. ``room``:
    how many more deliveries, and bytes of their bodies, the dispatcher may hold now.
    ``margin_s``: a unit whose lease runs out within this is given nothing (it is about to
    renew). ``orphaned``: called with the rows of a unit whose task ended before they
    arrived (cancelled at shutdown): they are leased to its token, and the callee sends them
    or lets their lease run out.
    ``hold``: called with the rows given to a running unit, before its task sees them (the
    dispatcher records the outcome of held rows only).
    """

    def __init__(self, *, max_rows: int, room: Callable[[], tuple[int, int]], margin_s: float,
                 orphaned: Callable[[Unit], None], hold: Callable[[Sequence[Job]], None],
                 clock: Callable[[], float]) -> None:
        self._max_rows = max_rows
        self._hold = hold
        self._room = room
        self._margin_s = margin_s
        self._orphaned = orphaned
        self._clock = clock
        self._by_url: dict[str, dict[str, LooseUnit]] = {}
        self._units: dict[str, LooseUnit] = {}
        self._incoming = 0
        self._incoming_bytes = 0
        self.closed = False
        self.handed_over = 0

    @property
    def incoming(self) -> int:
        """Rows reserved and not yet committed (or given up), all units together."""
        return self._incoming

    def open(self, unit: LooseUnit) -> None:
        """``unit``'s task runs: it may be given new rows of its URL."""
        self._units[unit.token] = unit
        self._by_url.setdefault(unit.url, {})[unit.token] = unit

    def close(self, unit: LooseUnit) -> None:
        """``unit``'s task ends (nothing is reserved for it any more, or it was cancelled)."""
        self._units.pop(unit.token, None)
        same_url = self._by_url.get(unit.url)
        if same_url is not None:
            same_url.pop(unit.token, None)
            if not same_url:
                del self._by_url[unit.url]

    def reserve(self, events: Sequence[NewEvent]) -> Leases:
        """For each unordered delivery of ``events`` that a running unit of its URL can take,
        that unit's token and lease (by the event's index in ``events``). Called on the
        event loop just before the transaction that writes them."""
        if self.closed or not self._by_url:
            return {}
        rows, size = self._room()
        rows -= self._incoming
        size -= self._incoming_bytes
        by_url: dict[str, list[int]] = {}
        for index, event in enumerate(events):
            url = event.webhook_url
            if url is not None and not event.webhook_ordered and url in self._by_url:
                size -= len(event.body)
                rows -= 1
                if rows < 0 or size < 0:
                    break
                by_url.setdefault(url, []).append(index)
        leases: Leases = {}
        fresh_after = self._clock() + self._margin_s
        for url, indexes in by_url.items():
            units = sorted((u for u in self._by_url[url].values()
                            if u.lease_until > fresh_after and not u.renewing),
                           key=lambda u: u.load)
            for index, unit in zip(indexes, _turns(units, len(indexes), self._max_rows),
                                   strict=False):
                unit.incoming += 1
                leases[index] = (unit.token, unit.lease_until)
                self._incoming_bytes += len(events[index].body)
        self._incoming += len(leases)
        return leases

    def handed(self, leases: Leases, delivery_ids: Mapping[int, int],
               events: Sequence[NewEvent], first_event_id: int) -> None:
        """The rows of ``leases`` are committed (``delivery_ids``: by event id): each goes
        to the end of its unit's ``todo``."""
        jobs: dict[str, list[Job]] = {}
        reserved_lease: dict[str, float] = {}
        size = 0
        for index, (token, lease) in leases.items():
            event = events[index]
            size += len(event.body)
            event_id = first_event_id + index
            url = event.webhook_url
            assert url is not None
            jobs.setdefault(token, []).append(Job(
                delivery_ids[event_id], event_id, event.simulation_id, event.message_type,
                url, 0, event.body, False))
            reserved_lease[token] = lease
        self._incoming -= len(leases)
        self._incoming_bytes -= size
        self.handed_over += len(leases)
        WEBHOOK_HANDED_OVER.inc(len(leases))
        for token, given in jobs.items():
            unit = self._units.get(token)
            lease_until = reserved_lease[token]
            if unit is None:
                self._orphaned(Unit(token, lease_until, given))
                continue
            unit.incoming -= len(given)
            if lease_until < unit.lease_until or unit.renewing:
                unit.stale = True  # it renewed since they were reserved: they were not
            self._hold(given)
            unit.todo.extend(given)
            unit.arrived.set()

    def cancel(self, leases: Leases, events: Sequence[NewEvent]) -> None:
        """The transaction of ``leases`` failed: nothing was written, nothing comes."""
        self._incoming -= len(leases)
        self._incoming_bytes -= sum(len(events[index].body) for index in leases)
        for token, _lease in leases.values():
            unit = self._units.get(token)
            if unit is not None:
                unit.incoming -= 1
                unit.arrived.set()


def _turns(units: Sequence[LooseUnit], count: int, max_rows: int) -> list[LooseUnit]:
    """``count`` rows shared among ``units`` in turn (the least loaded first, as the caller
    sorts them), none past ``max_rows`` in a unit's life: fewer when every unit is full."""
    caps = [max_rows - unit.sent - unit.load for unit in units]
    out: list[LooseUnit] = []
    while len(out) < count:
        before = len(out)
        for n, unit in enumerate(units):
            if caps[n] > 0:
                caps[n] -= 1
                out.append(unit)
                if len(out) == count:
                    break
        if len(out) == before:
            break
    return out


__all__ = ["Handover", "LooseUnit"]
