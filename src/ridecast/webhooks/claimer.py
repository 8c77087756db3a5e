"""The claim: leases units of due deliveries to this worker, and keeps or gives back leases.

A claim is one transaction (``store.txsteps``): record the results gathered since the last
one (``recorder``), count the units in flight, extend running chunks, read the heads of the
free lanes and URLs whose head came due first (no more of them than its free units need),
plan units (``claims.plan_units``), lock, lease. No claim waits for
another, and a stalled worker holds only what it leased:

* SQLite has one writer: the transaction holds the write lock from its first statement, so
  what it reads stays true until it commits;
* PostgreSQL: the slots of a URL are planned by one claim at a time, under a try-lock per
  URL held to the end of the transaction (a URL another claim is planning is left to the
  next claim, never waited for); after the lock the units in flight are counted again; each
  row is then locked ``FOR UPDATE SKIP LOCKED`` with its status checked on its newest
  version, and a unit stops before the first row it could not take. There is no global
  lock. A worker stopped inside the transaction loses it after ``claim_hold_s``
  (``store.outbox``'s ``begin_claim``).

A lease is dated after every lock of its transaction that can wait is held (never before
a wait); the lease statement itself locks its rows with ``SKIP LOCKED`` (never waiting) and
takes only rows still pending or whose lease ran out. An ordered lane is leased by its unit's
last row (``claims.leased_rows``): its other rows stay pending while they are sent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from ..metrics import WEBHOOK_CLAIM_SECONDS
from ..store.outbox import OutboxSql
from ..store.txsteps import StepRunner, Steps
from .claims import InFlight, Row, chunk_size, leased_rows, plan_units
from .jobs import Job, Result, Unit
from .recorder import Recorder

T = TypeVar("T")
# SQLite's clock counts whole milliseconds: a node's reading of the lease is taken that much
# earlier, so that it never ends after the store's.
CLOCK_RESOLUTION_S = 0.001
# The lanes and URLs a claim reads beyond one per unit it may plan (a page of them; see
# ``_claim_steps``): a few give no unit (their URL held by another claim, or filled by older
# units of the plan), and a short plan reads another page, at most ``KEY_PAGES`` in all.
KEY_SLACK = 4
KEY_PAGES = 4


def in_flight_of(rows: Sequence[tuple[Any, ...]]) -> InFlight:
    """Units in flight per URL and the held ordered lanes, from the in-flight query's rows
    (url, simulation_id, ordered, claim_token, id of one of its rows)."""
    units: set[tuple[str, str]] = set()
    lanes: set[int] = set()
    for url, simulation_id, ordered, claim_token, row_id in rows:
        units.add((url, claim_token or f"row-{row_id}"))
        if ordered:
            lanes.add(simulation_id)
    per_url: dict[str, int] = {}
    for url, _token in units:
        per_url[url] = per_url.get(url, 0) + 1
    return InFlight(per_url, lanes)


def _kept(unit: list[Row], leased: Sequence[int], got: set[int]) -> list[Row]:
    """What of ``unit`` a claim keeps, given the ids it leased and those it ``got``: an
    unordered unit up to its first row not taken (a unit stops at a gap); an ordered one
    whole if every row it leased was taken, else nothing."""
    if unit[0].ordered:
        return unit if got.issuperset(leased) else []
    for index, row in enumerate(unit):
        if row.id not in got:
            return unit[:index]
    return unit


def _filled(plan: Sequence[list[Row]], busy: InFlight, per_endpoint: int) -> set[str]:
    """The URLs with no slot left once ``plan``'s units are in flight too."""
    count = dict(busy.per_url)
    for unit in plan:
        count[unit[0].url] = count.get(unit[0].url, 0) + 1
    return {url for url, n in count.items() if n >= per_endpoint}


class Claimer:
    """Claims units and keeps their leases (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, sql: OutboxSql, recorder: Recorder) -> None:
        self._sql = sql
        self._recorder = recorder
        self._steps = StepRunner(engine)

    async def claim(
        self, *, max_units: int, unit_rows: int, per_endpoint: int, lease_s: float,
        record: Sequence[Result] = (), bodies: Mapping[int, bytes] | None = None,
        stale: bool = True, chunk_rows: int | None = None,
        extend: Sequence[tuple[str, str]] = (),
    ) -> list[Unit]:
        """Lease up to ``max_units`` units of due deliveries (see ``claims.plan_units``).

        ``record``: outcomes to write first, in the same transaction. ``bodies``: event
        bodies the caller already holds (by ``event_id``); only the missing ones are read
        from the log. ``stale``: also look for unordered rows whose lease ran out.
        ``chunk_rows``: the most rows of an unordered chunk (default ``unit_rows``).
        ``extend``: (claim token, URL) of this worker's unordered chunks that are running
        out: each still holding its lease gets more due rows of its URL under the same token
        (the same slot), returned as a ``Unit`` with that token, before new units are planned.
        """
        started = time.perf_counter()
        units = await self._steps.run(lambda: self._claim_steps(
            lease_s, max_units, unit_rows, per_endpoint, record, bodies or {}, stale,
            unit_rows if chunk_rows is None else chunk_rows, extend))
        WEBHOOK_CLAIM_SECONDS.observe(time.perf_counter() - started)
        return units

    def _claim_steps(
        self, lease_s: float, max_units: int, unit_rows: int, per_endpoint: int,
        record: Sequence[Result], known: Mapping[int, bytes], stale: bool, chunk_max: int,
        extend: Sequence[tuple[str, str]],
    ) -> Steps[list[Unit]]:
        sql = self._sql
        yield from sql.begin_claim(writes_first=bool(record))
        # Leases are dated and compared by the store's clock, not this node's: read once,
        # after the claim holds what it waits for (nothing below waits). The units carry
        # their lease in this node's clock, from a reading taken before the store's, so a
        # node never thinks a lease lasts longer than the store does.
        node_now = time.time() - CLOCK_RESOLUTION_S
        now = yield from sql.clock()
        if record:
            yield from self._recorder.steps(record, now)
        if max_units <= 0 and not extend:
            return []
        leased = yield sql.in_flight_query(now)
        busy = in_flight_of(leased)
        units: list[Unit] = []
        if extend:
            # Only a token that still holds a lease holds its slot; one whose rows are all
            # recorded is not counted in flight, and its slot is planned below.
            holding = {token for _url, _sim, ordered, token, _first in leased
                       if token is not None and not ordered}
            units += yield from self._extend_steps(
                lease_s, [(t, url) for t, url in extend if t in holding], per_endpoint,
                chunk_max, known, now, node_now)
        if max_units <= 0:
            return units
        # Unordered rows: per URL, no more than its free slots can take.
        room = min(per_endpoint, max_units)
        chunk_rows = {url: min(room, max(0, per_endpoint - count)) * chunk_max
                      for url, count in busy.per_url.items()}
        # The lanes and URLs are read a page of ``keys`` at a time, the oldest heads first:
        # each gives at least one unit, so one page is enough unless some give none (their
        # URL held by another claim, or filled by the plan's older units); then the next
        # page, without them.
        keys = max_units + KEY_SLACK
        active: list[Row] = []
        extra: dict[int, tuple[str, int]] = {}
        read_lanes: set[int] = set()
        read_urls: set[str] = set()
        locked: set[str] = set()
        elsewhere: set[str] = set()
        plan: list[list[Row]] = []
        for page in range(KEY_PAGES):
            rows, more = yield from self._candidates(
                now, unit_rows, chunk_rows, room * chunk_max, busy.lanes | read_lanes,
                stale=stale and page == 0, keys=keys, skip_urls=read_urls,
                closed_urls=elsewhere | _filled(plan, busy, per_endpoint))
            active += rows
            extra |= more
            lanes = {row.simulation_id for row in rows if row.ordered}
            urls = {row.url for row in rows if not row.ordered and row.status == "pending"}
            read_lanes |= lanes
            read_urls |= urls
            # Plan, and hold the URLs of the plan; a URL another claim holds is left out and
            # the plan made again without it (its units go to the next URLs in line).
            while True:
                plan = plan_units([row for row in active if row.url not in elsewhere], busy,
                                  now=now, per_endpoint=per_endpoint, unit_rows=unit_rows,
                                  max_units=max_units, chunk_rows=chunk_max)
                wanted = {unit[0].url for unit in plan} - locked
                if not wanted:
                    break
                got = yield from sql.lock_urls(sorted(wanted))
                locked |= got
                elsewhere |= wanted - got
            if len(plan) >= max_units or len(lanes) + len(urls) < keys:
                break  # the plan is full, or every lane and URL due has been read
        if not plan:
            return units
        recount = yield from sql.in_flight_after_lock(now)
        if recount is not None:
            # Another claim may have leased slots of these URLs before this one held them:
            # plan again on what is in flight now, with the URLs this claim holds.
            plan = plan_units([row for row in active if row.url in locked],
                              in_flight_of(recount), now=now, per_endpoint=per_endpoint,
                              unit_rows=unit_rows, max_units=max_units, chunk_rows=chunk_max)
        # Every lock that can wait was held before ``now`` was read (the URL locks and the
        # row locks of ``take`` never wait): the lease starts then.
        leased_at = now
        lease_until = leased_at + lease_s
        tokens = [uuid.uuid4().hex for _ in plan]
        leases = [leased_rows(unit) for unit in plan]
        taken = yield from sql.take(leased_at, lease_until, [
            (token, ids) for ids, token in zip(leases, tokens, strict=True)])
        # An unordered unit stops before the first row another claim holds, and an ordered
        # one is kept only if every row it leases was taken; rows taken beyond that (its
        # order would break) are given back at once.
        kept = [_kept(unit, ids, taken) for unit, ids in zip(plan, leases, strict=True)]
        beyond = [(row.id, token) for unit, head, token in zip(plan, kept, tokens, strict=True)
                  for row in unit[len(head):] if row.id in taken]
        if beyond:
            yield from sql.releases(leased_at, beyond)
        plan, tokens = [u for u in kept if u], [t for u, t in zip(kept, tokens, strict=True) if u]
        if not plan:
            return units
        read = yield from sql.bodies(
            [row.event_id for unit in plan for row in unit if row.event_id not in known])
        for unit, token in zip(plan, tokens, strict=True):
            jobs = []
            for row in unit:
                message_type, attempt_count = extra[row.id]
                body = known.get(row.event_id)
                jobs.append(Job(row.id, row.event_id, row.simulation_id, message_type, row.url,
                                attempt_count, read.get(row.event_id) if body is None else body,
                                row.ordered, token))
            units.append(Unit(token, node_now + lease_s, jobs))
        return units

    def _extend_steps(
        self, lease_s: float, extend: Sequence[tuple[str, str]], per_endpoint: int,
        rows: int, known: Mapping[int, bytes], now: float, node_now: float,
    ) -> Steps[list[Unit]]:
        """Lease more due unordered rows of each URL to its running tokens, shared as
        ``chunk_size`` shares a URL's rows among new chunks."""
        by_url: dict[str, list[str]] = {}
        for token, url in extend:
            by_url.setdefault(url, []).append(token)
        units: list[Unit] = []
        for url, tokens in by_url.items():
            found = yield from self._sql.free_url_rows(url, now, len(tokens) * rows)
            if not found:
                continue
            size = chunk_size(len(found), len(tokens), per_endpoint, rows)
            # Shared as they came due, each share sent in event-id order (``claims``).
            shares = [(token, sorted(found[n * size:(n + 1) * size], key=lambda row: row[1]))
                      for n, token in enumerate(tokens)]
            shares = [(token, share) for token, share in shares if share]
            yield from self._sql.lease(now, now + lease_s, [
                (token, [row[0] for row in share]) for token, share in shares])
            read = yield from self._sql.bodies(
                [row[1] for _token, share in shares for row in share if row[1] not in known])
            for token, share in shares:
                jobs = []
                for id_, event_id, simulation_id, message_type, attempt_count in share:
                    body = known.get(event_id)
                    jobs.append(Job(id_, event_id, simulation_id, message_type, url,
                                    attempt_count, read.get(event_id) if body is None else body,
                                    False, token))
                units.append(Unit(token, node_now + lease_s, jobs))
        return units

    def _candidates(
        self, now: float, lane_rows: int, chunk_rows: dict[str, int],
        default_chunk_rows: int, busy_lanes: set[int], *, stale: bool, keys: int,
        skip_urls: set[str], closed_urls: set[str],
    ) -> Steps[tuple[list[Row], dict[int, tuple[str, int]]]]:
        """The rows a plan can use, read through the partial indexes rather than every active
        row, of at most ``keys`` lanes and URLs, those whose head came due first
        (``OutboxSql.heads``): the first ``lane_rows`` of each free simulation's ordered
        queue, and the first unordered rows of each URL to have come due (``chunk_rows`` of
        it, or ``default_chunk_rows``); with each row's message type and attempt count.
        ``plan_units`` hands out units by their earliest row, keys are chosen by their head:
        the two differ only where a retry at a lane's head came due after rows behind it,
        and then that lane waits for a later page or claim. Unordered rows whose lease ran
        out are read only when ``stale`` (the poll asks: they have waited a whole lease
        already)."""
        rows = yield from self._sql.heads(now, lane_rows, chunk_rows, default_chunk_rows,
                                          busy_lanes, stale=stale, keys=keys,
                                          skip_urls=skip_urls, closed_urls=closed_urls)
        found: list[Row] = []
        extra: dict[int, tuple[str, int]] = {}
        for (id_, sim, url, event_id, ordered, status, next_at, lease, token, message_type,
             attempt_count) in rows:
            found.append(Row(id_, sim, url, event_id, bool(ordered), status, next_at, lease,
                             token))
            extra[id_] = (message_type, attempt_count)
        return found, extra

    async def renew(self, token: str, delivery_ids: Sequence[int], lease_until: float,
                    *, lane: bool = False) -> bool:
        """Extend the lease of a unit's unsent deliveries; False if the unit no longer holds
        every one of them (its lease ran out and another worker claimed them). ``lane``: an
        ordered unit, held by the lease of its last row (``claims.leased_rows``), the last
        of ``delivery_ids``."""
        if not delivery_ids:
            return True
        kept = await self.keep(token, lease_until)
        return delivery_ids[-1] in kept if lane else set(delivery_ids) <= kept

    async def keep(self, token: str, lease_until: float) -> set[int]:
        """Extend the lease of every delivery ``token`` still holds (sent, its result not yet
        written, or still to send) to ``lease_until``; their ids."""
        def steps() -> Steps[set[int]]:
            # ``lease_until`` is in this node's clock: the store's lease runs as long from
            # the store's now, read after this node's (never shorter than the node thinks).
            node_now = time.time()
            now = yield from self._sql.clock()
            return (yield from self._sql.renew(token, now, now + (lease_until - node_now)))

        return await self._steps.run(lambda: self._sql.held(steps()))

    async def release(self, held: Sequence[tuple[int, str]]) -> None:
        """Give leased deliveries (id, claim token) back, due now, where the token still
        holds them (a dispatcher stops, or hands back part of a lane it already sends)."""
        if held:
            await self._steps.run(lambda: self._sql.held(self._at_store_time(
                lambda now: self._sql.releases(now, held))))

    def _at_store_time(self, steps: Callable[[float], Steps[T]]) -> Steps[T]:
        """``steps`` at the store's time now (leases are compared by the store's clock)."""
        now = yield from self._sql.clock()
        return (yield from steps(now))

    @property
    def ends_stalled(self) -> bool:
        """Whether ``end_stalled`` can do anything on this store (PostgreSQL)."""
        return self._sql.ends_stalled

    async def end_stalled(self, hold_s: float) -> int:
        """End the store sessions of workers stopped in the middle of a statement with rows
        locked for over ``hold_s`` (PostgreSQL; see ``OutboxSql.end_stalled``); how many."""
        if not self._sql.ends_stalled:
            return 0
        return await self._steps.run(lambda: self._sql.end_stalled(hold_s))

    async def repoint(self, simulation_id: int, url: str, token: str) -> None:
        """Send the simulation's waiting deliveries, and those ``token`` holds, to ``url``,
        the URL now in force: one statement, whatever the number of rows."""
        await self._steps.run(lambda: self._sql.held(
            self._at_store_time(lambda now: self._sql.repoint(simulation_id, url, token, now))))


__all__ = ["Claimer", "in_flight_of"]
