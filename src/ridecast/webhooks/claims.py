"""Which due deliveries a claim may take, as units of work (pure: no I/O, never awaits).

A **unit** is a short list of deliveries that one dispatcher task sends one after the other,
over one connection, in ``event_id`` order, under one claim token (``leased_rows`` says which
of its rows carry it). A unit occupies one slot of its endpoint (URL), so a unit is one
request in flight: ``per_endpoint`` units at most per URL, counted over every worker through
the store.

Two kinds of unit:

* **ordered lane** (the default): the head of one simulation's queue. A simulation's ordered
  deliveries form one lane, sent in ``event_id`` order; a lane is claimed only when none of
  its deliveries is leased (no other worker holds it) and its head is due, and the unit is
  the longest run of due deliveries from the head (at most ``unit_rows``). A delivery waiting
  for a retry is not due, so everything behind it waits too (head-of-line).
* **unordered chunk** (``messaging_webhook_ordering: "unordered"``): due deliveries of one
  URL, in the order they came due (a new delivery when it was stored, a retry when its delay
  ran out); chunks of one URL run in parallel, up to the limit. A backlog goes out
  in chunks of ``chunk_rows``, fewer rows are shared evenly among the URL's slots
  (``chunk_size``). A chunk running out gets more rows under its claim token, shared the
  same way (``Claimer.claim``'s ``extend``), so its slot does not wait for a claim (chunks
  started together otherwise end together and leave every slot idle for the next claim;
  docs/performance.md).

Units are handed out in the order they came due (the unit whose delivery has been due the
longest first; among new deliveries, the oldest), so no endpoint starves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(slots=True)  # not frozen: one per candidate row of every claim (see jobs.Job)
class Row:
    """What the claim needs to know of one active (pending or delivering) delivery."""

    id: int
    simulation_id: int
    url: str
    event_id: int
    ordered: bool
    status: str  # pending | delivering
    next_attempt_at: float
    lease_until: float | None
    claim_token: str | None


def is_busy(row: Row, now: float) -> bool:
    """Leased by a live worker: its lease has not run out."""
    return row.status == "delivering" and row.lease_until is not None and row.lease_until >= now


def is_due(row: Row, now: float) -> bool:
    """May be sent now: pending and its time has come, or leased by a worker that went away."""
    if row.status == "pending":
        return row.next_attempt_at <= now
    return not is_busy(row, now)


@dataclass(frozen=True, slots=True)
class InFlight:
    """Units in flight (leases that have not run out), as the store counts them with one
    aggregate query: units per URL, and the simulations whose ordered lane is held."""

    per_url: dict[str, int]
    lanes: set[int]


def in_flight(rows: Iterable[Row], now: float) -> InFlight:
    """The ``InFlight`` of a list of rows (what the aggregate query computes in SQL)."""
    tokens: dict[str, set[str]] = {}
    lanes: set[int] = set()
    for row in rows:
        if is_busy(row, now):
            tokens.setdefault(row.url, set()).add(row.claim_token or f"row-{row.id}")
            if row.ordered:
                lanes.add(row.simulation_id)
    return InFlight({url: len(t) for url, t in tokens.items()}, lanes)


def leased_rows(unit: Sequence[Row]) -> list[int]:
    """The ids of ``unit``'s rows that its claim leases (``status = 'delivering'`` under the
    unit's token).

    An unordered chunk: every row, since its rows are independent (a row whose lease ran out
    is taken alone, ``stale``). An ordered lane: its last row, which is the lane's lease
    (while it is leased, no claim plans the lane, and a result of the unit's other rows is
    written only while it holds), and any row still leased under a lease that ran out (it
    changes token, so the old one holds nothing of this lane). The other rows stay pending
    while they are sent: one write per delivery fewer."""
    if not unit[0].ordered:
        return [row.id for row in unit]
    return [row.id for row in unit[:-1] if row.status != "pending"] + [unit[-1].id]


def plan_claim(
    rows: Iterable[Row], *, now: float, per_endpoint: int, unit_rows: int, max_units: int,
    chunk_rows: int | None = None,
) -> list[list[Row]]:
    """The units to claim now from all active ``rows``, each in ``event_id`` order."""
    rows = list(rows)
    return plan_units(rows, in_flight(rows, now), now=now, per_endpoint=per_endpoint,
                      unit_rows=unit_rows, max_units=max_units, chunk_rows=chunk_rows)


def chunk_size(due: int, free_slots: int, slots: int, chunk_rows: int) -> int:
    """Rows per chunk for ``due`` unordered rows of a URL with ``slots`` slots, ``free_slots``
    of them free now: a backlog (enough to give every free slot a full chunk), ``chunk_rows``;
    fewer, shared among all the URL's slots, so that the chunks started now and those that
    busy slots take when they free up end about together (the tail of a burst is not left
    to a few long chunks). A claim reads at most ``free_slots * chunk_rows`` of a URL's
    rows, and this gives the same size on those as on all of them."""
    if due >= max(1, free_slots) * chunk_rows:
        return chunk_rows
    return max(1, min(chunk_rows, -(-due // max(1, slots))))


def plan_units(
    rows: Iterable[Row], busy: InFlight, *, now: float, per_endpoint: int, unit_rows: int,
    max_units: int, chunk_rows: int | None = None,
) -> list[list[Row]]:
    """The units to claim now, given what is in flight (``busy``) and the candidate rows:
    at least the first ``unit_rows`` active rows of each ordered lane and the due unordered
    rows (a lane's unit has at most ``unit_rows``, a chunk at most ``chunk_rows``, by default
    the same). Leased rows among them are never handed out."""
    if max_units <= 0 or unit_rows <= 0:
        return []
    lanes: dict[int, list[Row]] = {}
    loose: dict[str, list[Row]] = {}
    for row in rows:
        if row.ordered:
            if row.simulation_id not in busy.lanes:
                lanes.setdefault(row.simulation_id, []).append(row)
        elif is_due(row, now):
            loose.setdefault(row.url, []).append(row)
    candidates: list[list[Row]] = []
    for lane in lanes.values():
        lane.sort(key=lambda r: r.event_id)
        if any(is_busy(r, now) for r in lane):
            continue  # another worker (or this one) is sending this simulation
        run: list[Row] = []
        for row in lane:
            if len(run) == unit_rows or not is_due(row, now):
                break
            run.append(row)
        if run:
            candidates.append(run)
    for url, due in loose.items():
        # A URL's rows go out as they came due (the store reads them in that order,
        # ``store.outbox.DUE_ORDER``), each chunk sent in event-id order.
        due.sort(key=lambda r: (r.next_attempt_at, r.event_id))
        size = chunk_size(len(due), min(max_units, per_endpoint - busy.per_url.get(url, 0)),
                          per_endpoint, unit_rows if chunk_rows is None else chunk_rows)
        candidates += [sorted(due[i:i + size], key=lambda r: r.event_id)
                       for i in range(0, len(due), size)]
    candidates.sort(key=lambda unit: min((r.next_attempt_at, r.event_id) for r in unit))
    free = {url: per_endpoint - count for url, count in busy.per_url.items()}
    chosen: list[list[Row]] = []
    for unit in candidates:
        url = unit[0].url
        if free.get(url, per_endpoint) <= 0:
            continue
        free[url] = free.get(url, per_endpoint) - 1
        chosen.append(unit)
        if len(chosen) == max_units:
            break
    return chosen


__all__ = ["InFlight", "Row", "chunk_size", "in_flight", "is_busy", "is_due", "leased_rows",
           "plan_claim", "plan_units"]
