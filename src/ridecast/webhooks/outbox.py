"""The webhook outbox in the store: claim due deliveries with a lease, record attempts, replay.

``EventLog.append`` writes a ``pending`` delivery in the transaction of its event. A
dispatcher (in ``serve`` or in a ``ridecast worker``) claims due rows by setting them
``delivering`` with a ``lease_until``; a row whose lease ran out (its process died or hung)
is due again, so a kill -9 at any moment loses nothing: deliveries are at least once.

A claim reads the active rows, lets ``claims.plan_claim`` pick units (ordered lanes, one per
simulation; unordered chunks) within the per-endpoint limit, and leases them, in one
transaction. Claims are serialised (SQLite: the write lock; PostgreSQL: a transaction-scoped
advisory lock), so the count of units in flight per endpoint holds across every worker; on
PostgreSQL the chosen rows are then locked ``FOR UPDATE SKIP LOCKED``, so a claim never waits
for a row another transaction (a replay, a result being recorded) holds.

Statuses: pending -> delivering -> succeeded | pending (retry) | failed | disabled.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from ..store.tables import (
    LANE_ROWS_WHERE,
    LOOSE_PENDING_WHERE,
    active_delivery_wheres,
    first_id_since,
    webhook_attempts,
    webhook_deliveries,
    webhook_endpoints,
)
from ..store.txsteps import Many, Query, StepRunner, Steps
from .claims import InFlight, Row, chunk_size, plan_units

D = webhook_deliveries
A = webhook_attempts
E = webhook_endpoints

# The transaction-scoped advisory lock that serialises claims on PostgreSQL ("rcwh").
CLAIM_LOCK_KEY = 0x72637768
ACTIVE_STATES = ("pending", "delivering")
# A Result with this status gives the delivery back unsent (no attempt was made).
RELEASE = "release"
# SQLite: one statement per unit, its ids as a JSON array (``json_each``): a statement run
# per row cost about 4 µs a row on the driver's thread, this about 1.
_LEASE_SQL = ("UPDATE webhook_deliveries SET status = 'delivering', lease_until = ?, "
              "claim_token = ?, updated_at = ? WHERE id IN (SELECT value FROM json_each(?))")
# A success is written on the delivery row itself (one write per delivered event, see
# ``_record``); a success already there (a replayed delivery, or one sent twice after a
# lease ran out) first moves to webhook_attempts, so the log keeps every attempt.
_SUCCESS_SQL = ("UPDATE webhook_deliveries SET status = 'succeeded', "
                "attempt_count = attempt_count + 1, next_attempt_at = ?, last_error = NULL, "
                "lease_until = NULL, claim_token = NULL, updated_at = ?, "
                "success_started_at = ?, success_latency_ms = ?, success_status_code = ?, "
                "success_response_body = ? WHERE id = ?")
# The same for many rows per statement (``Many``'s ``values``; UPDATE ... FROM needs SQLite
# 3.33), its VALUES columns in ``_SUCCESS_SQL``'s parameter order.
_SUCCESS_VALUES_SQL = (
    "WITH u(next_at, updated, started, latency, code, body, id) AS ({values}) "
    "UPDATE webhook_deliveries SET status = 'succeeded', "
    "attempt_count = attempt_count + 1, next_attempt_at = u.next_at, last_error = NULL, "
    "lease_until = NULL, claim_token = NULL, updated_at = u.updated, "
    "success_started_at = u.started, success_latency_ms = u.latency, "
    "success_status_code = u.code, success_response_body = u.body "
    "FROM u WHERE webhook_deliveries.id = u.id"
) if sqlite3.sqlite_version_info >= (3, 33, 0) else None
# SQLite: the success written only where the row holds none yet (the common case); the
# count of rows changed tells whether any held one (``_record_steps``).
_FIRST_SUCCESS_SQL = _SUCCESS_SQL + " AND success_started_at IS NULL"
_FIRST_SUCCESS_VALUES_SQL = None if _SUCCESS_VALUES_SQL is None else (
    _SUCCESS_VALUES_SQL + " AND webhook_deliveries.success_started_at IS NULL")
_SUCCESS_HELD_SQL = ("SELECT id, success_started_at FROM webhook_deliveries "
                     "WHERE id IN (SELECT value FROM json_each(:ids))")
_KEEP_SUCCESS_SQL = ("INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, "
                     "status_code, error_class, error, response_body) SELECT id, "
                     "success_started_at, success_latency_ms, success_status_code, NULL, NULL, "
                     "success_response_body FROM webhook_deliveries WHERE id IN "
                     "(SELECT value FROM json_each(:ids)) AND success_started_at IS NOT NULL "
                     "ORDER BY id")
_PG_LEASE_SQL = ("UPDATE webhook_deliveries AS d SET status = 'delivering', "
                 "lease_until = :lease, claim_token = u.token, updated_at = :now "
                 "FROM unnest(CAST(:ids AS bigint[]), CAST(:tokens AS varchar[])) "
                 "AS u(id, token) WHERE d.id = u.id")
_PG_KEEP_SUCCESS_SQL = ("INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, "
                        "status_code, error_class, error, response_body) SELECT id, "
                        "success_started_at, success_latency_ms, success_status_code, NULL, "
                        "NULL, success_response_body FROM webhook_deliveries "
                        "WHERE id = ANY(CAST(:ids AS bigint[])) "
                        "AND success_started_at IS NOT NULL ORDER BY id")
_PG_SUCCESS_SQL = ("UPDATE webhook_deliveries AS d SET status = 'succeeded', "
                   "attempt_count = d.attempt_count + 1, next_attempt_at = :now, "
                   "last_error = NULL, lease_until = NULL, claim_token = NULL, "
                   "updated_at = :now, success_started_at = u.started, "
                   "success_latency_ms = u.latency, success_status_code = u.code, "
                   "success_response_body = u.body FROM unnest(CAST(:ids AS bigint[]), "
                   "CAST(:started AS double precision[]), CAST(:latency AS double precision[]), "
                   "CAST(:code AS integer[]), CAST(:body AS text[])) "
                   "AS u(id, started, latency, code, body) WHERE d.id = u.id")
_RELEASE_SQL = ("UPDATE webhook_deliveries SET status = 'pending', lease_until = NULL, "
                "claim_token = NULL, updated_at = ? WHERE id = ? AND status = 'delivering'")
_RESULT_SQL = ("UPDATE webhook_deliveries SET status = ?, attempt_count = ?, "
               "next_attempt_at = ?, last_error = ?, lease_until = NULL, claim_token = NULL, "
               "updated_at = ? WHERE id = ?")
_HEALTHY_SQL = "DELETE FROM webhook_endpoints WHERE simulation_id = ?"
_ATTEMPT_SQL = ("INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, "
                "status_code, error_class, error, response_body) VALUES (?, ?, ?, ?, ?, ?, ?)")
# Units in flight: one row per unit (claim token) holding a lease, not one per leased
# delivery. The partial index ``ix_deliveries_leased`` is read by a skip scan (one seek per
# claim token, as ``Outbox._keys``), then one seek per token for a row whose lease holds;
# rows leased with no token (written before claim tokens) are a unit each. Reading every
# leased row instead (thousands, in a burst) took 4-8 ms of SQLite's write lock per claim.
_IN_FLIGHT_SQL = (
    "WITH RECURSIVE k(t) AS (SELECT MIN(claim_token) FROM webhook_deliveries{hint} "
    "WHERE status = 'delivering' UNION ALL SELECT (SELECT MIN(claim_token) "
    "FROM webhook_deliveries{hint} WHERE status = 'delivering' AND claim_token > k.t) "
    "FROM k WHERE k.t IS NOT NULL) "
    "SELECT d.url, d.simulation_id, d.ordered, d.claim_token, d.id FROM k "
    "JOIN webhook_deliveries AS d ON d.id = (SELECT id FROM webhook_deliveries{hint} "
    "WHERE status = 'delivering' AND claim_token = k.t AND lease_until >= :now LIMIT 1) "
    "UNION ALL SELECT url, simulation_id, ordered, claim_token, id "
    "FROM webhook_deliveries{hint} WHERE status = 'delivering' AND claim_token IS NULL "
    "AND lease_until >= :now"
)
# The newest delivery id: the last entry of the primary key (``newest_id``, and the outbox
# watch's readers on connections of their own, ``watch``).
NEWEST_ID_SQL = "SELECT max(id) FROM webhook_deliveries"
BODY_READ_CHUNK = 500  # event ids per read of bodies (well under SQLite's variable limit)
_SUCCESS_COLUMNS = ("success_started_at", "success_latency_ms", "success_status_code",
                    "success_response_body")
# Index range reads (a lane's head, a URL's oldest rows) per statement of a claim.
CANDIDATE_PARTS = 64

TERMINAL_STATES = ("succeeded", "failed", "disabled")
STATES = ("pending", "delivering", *TERMINAL_STATES)


@dataclass(slots=True)
class Job:
    """A claimed delivery, with the event body to send.

    Not frozen, like ``Result``, ``Unit``, ``sender.Attempt`` and ``http11.Answer``: these are
    made once or more per delivery, and a frozen dataclass's ``__init__`` costs about four
    times a plain one's (one ``object.__setattr__`` per field). Nothing mutates them.
    """

    delivery_id: int
    event_id: int
    simulation_id: int
    message_type: str
    url: str
    attempt_count: int
    body: bytes | None  # None when retention removed the event (cannot be sent)
    ordered: bool = True

    @property
    def msg_id(self) -> str:
        """The ``webhook-id``: one per event, the same on every retry (receivers dedupe)."""
        return f"msg_{self.event_id}"


@dataclass(slots=True)  # not frozen: made per delivery (see outbox.Job)
class Result:
    """The new state of a delivery after an attempt (``attempt`` None: none was made)."""

    delivery_id: int
    status: str
    attempt_count: int
    next_attempt_at: float
    last_error: str | None
    # A failed attempt, for webhook_attempts (``dispatcher._attempt_row``); a success's
    # travels in ``success``.
    attempt: dict[str, Any] | None = None
    simulation_id: int | None = None  # set on a success: clears the endpoint's failing clock
    # A success's attempt as the delivery row keeps it, instead of ``attempt`` (no dict per
    # delivery): started_at, latency_ms, status_code, response_body.
    success: tuple[float, float, int | None, str | None] | None = None


@dataclass(slots=True)  # not frozen: made per delivery (see outbox.Job)
class Unit:
    """Deliveries claimed together, sent one after the other (see ``claims``)."""

    token: str
    lease_until: float
    jobs: list[Job]


def _with_attempts(row: Mapping[Any, Any], attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """A delivery row as ``list`` and ``get`` give it: its attempts oldest first, the
    success kept on the row (``_SUCCESS_SQL``) among them, as the attempt row it stands for."""
    item = {k: v for k, v in row.items() if k not in _SUCCESS_COLUMNS}
    if row["success_started_at"] is not None:
        attempts = [*attempts, {
            "id": None, "delivery_id": row["id"], "started_at": row["success_started_at"],
            "latency_ms": row["success_latency_ms"],
            "status_code": row["success_status_code"], "error_class": None, "error": None,
            "response_body": row["success_response_body"],
        }]
        # Oldest first. The kept success is the newest attempt unless a second sender of
        # the same delivery (its lease ran out) finished after it.
        attempts.sort(key=lambda a: a["started_at"])
    item["attempts"] = attempts
    return item


def _in_flight(rows: Sequence[tuple[Any, ...]]) -> InFlight:
    """Units in flight per URL and the held ordered lanes, from ``_IN_FLIGHT_SQL``'s rows."""
    units: set[tuple[str, str]] = set()
    lanes: set[int] = set()
    for url, simulation_id, ordered, claim_token, first in rows:
        units.add((url, claim_token or f"row-{first}"))
        if ordered:
            lanes.add(simulation_id)
    per_url: dict[str, int] = {}
    for url, _token in units:
        per_url[url] = per_url.get(url, 0) + 1
    return InFlight(per_url, lanes)


def _body(event_id: int, known: Mapping[int, bytes], read: Mapping[int, bytes]) -> bytes | None:
    """An event's body: the one the dispatcher holds, else the one read from the log (None
    when retention removed the event)."""
    body = known.get(event_id)
    return read.get(event_id) if body is None else body


def _prefix(unit: Sequence[Row], got: set[int]) -> int:
    for index, row in enumerate(unit):
        if row.id not in got:
            return index
    return len(unit)


class Outbox:
    """Queries on ``webhook_deliveries`` and ``webhook_attempts``."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        self._postgres = self._dialect == "postgresql"
        self._steps = StepRunner(engine)
        self._in_flight_sql = _IN_FLIGHT_SQL.format(
            hint=self._indexed_by("ix_deliveries_leased"))

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    def _indexed_by(self, index: str) -> str:
        """SQLite's planner may pick another index and sort: it is told the partial
        ``index``; PostgreSQL finds it by itself."""
        return "" if self._postgres else f" INDEXED BY {index}"

    async def claim(
        self, *, max_units: int, unit_rows: int, per_endpoint: int, lease_s: float,
        record: Sequence[Result] = (), bodies: Mapping[int, bytes] | None = None,
        stale: bool = True, chunk_rows: int | None = None,
        extend: Sequence[tuple[str, str]] = (),
    ) -> list[Unit]:
        """Lease up to ``max_units`` units of due deliveries (see ``claims.plan_units``).

        ``record``: outcomes to write first, in the same transaction (what they free, a
        lane or a slot, can be claimed again at once). ``bodies``: event bodies the caller
        already holds (by ``event_id``), so only the missing ones are read from the log.
        ``stale``: also look for unordered rows whose lease ran out (see ``_candidates``).
        ``chunk_rows``: the most rows of an unordered chunk (default ``unit_rows``).
        ``extend``: (claim token, URL) of this worker's unordered chunks that are running out:
        each still holding its lease gets more due rows of its URL (up to ``chunk_rows``,
        shared as ``claims.chunk_size`` shares new chunks) under the same token (the same
        slot: the per-endpoint count does not change), returned as a ``Unit`` with that
        token, before new units are planned.
        The transaction is one trip to the driver's thread on SQLite (``txsteps``).
        """
        now = time.time()
        return await self._steps.run(lambda: self._claim_steps(
            now, now + lease_s, max_units, unit_rows, per_endpoint, record, bodies or {},
            stale, unit_rows if chunk_rows is None else chunk_rows, extend))

    def _claim_steps(
        self, now: float, lease_until: float, max_units: int, unit_rows: int,
        per_endpoint: int, record: Sequence[Result], known: Mapping[int, bytes], stale: bool,
        chunk_max: int, extend: Sequence[tuple[str, str]],
    ) -> Steps[list[Unit]]:
        # Claims are serialised, so the in-flight count each one reads (the per-endpoint
        # limit, the lane being free) cannot be raced by another worker's claim.
        if self._postgres:
            yield Query("SELECT pg_advisory_xact_lock(:key)", {"key": CLAIM_LOCK_KEY})
        elif not record:
            # SQLite: a write first takes the database's write lock for the transaction.
            yield Query("UPDATE webhook_deliveries SET claim_token = NULL WHERE id = -1")
        if record:
            yield from self._record_steps(record, now)
        if max_units <= 0 and not extend:
            return []
        leased = yield Query(self._in_flight_sql, {"now": now})
        busy = _in_flight(leased)
        extended: list[Unit] = []
        if extend:
            # Only a token that still holds a lease holds its slot; one whose rows are all
            # recorded is not counted in flight, and its slot is planned below.
            holding = {token for _url, _sim, ordered, token, _first in leased
                       if token is not None and not ordered}
            extended = yield from self._extend_steps(
                now, lease_until, [(t, url) for t, url in extend if t in holding],
                per_endpoint, chunk_max, known)
        if max_units <= 0:
            return extended
        # Unordered rows: per URL, no more than its free slots can take.
        room = min(per_endpoint, max_units)
        chunk_rows = {url: min(room, max(0, per_endpoint - count)) * chunk_max
                      for url, count in busy.per_url.items()}
        active, extra = yield from self._candidates(now, unit_rows, chunk_rows,
                                                    room * chunk_max, busy.lanes, stale=stale)
        plan = plan_units(active, busy, now=now, per_endpoint=per_endpoint,
                          unit_rows=unit_rows, max_units=max_units, chunk_rows=chunk_max)
        if not plan:
            return extended
        if self._postgres:
            # Rows another transaction holds (a replay, a result being recorded) are
            # skipped, not waited for; a unit stops before the first one skipped.
            wanted = [row.id for unit in plan for row in unit]
            got = {r[0] for r in (yield Query(
                select(D.c.id).where(D.c.id.in_(wanted)).with_for_update(skip_locked=True)))}
            plan = [unit[:_prefix(unit, got)] for unit in plan]
            plan = [unit for unit in plan if unit]
        tokens = [uuid.uuid4().hex for _ in plan]
        yield from self._lease_steps(now, lease_until, [
            (token, [row.id for row in unit]) for unit, token in zip(plan, tokens, strict=True)])
        read = yield from self._bodies_steps(
            [row.event_id for unit in plan for row in unit if row.event_id not in known])
        units = extended
        for unit, token in zip(plan, tokens, strict=True):
            jobs = []
            for row in unit:
                message_type, attempt_count = extra[row.id]
                jobs.append(Job(row.id, row.event_id, row.simulation_id, message_type, row.url,
                                attempt_count, _body(row.event_id, known, read), row.ordered))
            units.append(Unit(token, lease_until, jobs))
        return units

    def _lease_steps(self, now: float, lease_until: float,
                     units: Sequence[tuple[str, Sequence[int]]]) -> Steps[None]:
        """Lease each unit's deliveries (claim token, delivery ids) to its token."""
        if self._postgres:
            # Every unit in one statement (see ``_PG_SUCCESS_SQL``).
            yield Query(_PG_LEASE_SQL, {"lease": lease_until, "now": now,
                                        "ids": [i for _token, ids in units for i in ids],
                                        "tokens": [t for t, ids in units for _i in ids]})
        else:
            yield Many(_LEASE_SQL, [(lease_until, token, now, json.dumps(list(ids)))
                                    for token, ids in units])

    def _bodies_steps(self, event_ids: Sequence[int]) -> Steps[dict[int, bytes]]:
        """The bodies of ``event_ids`` from the event log (those retention left)."""
        read: dict[int, bytes] = {}
        for start in range(0, len(event_ids), BODY_READ_CHUNK):
            part = event_ids[start:start + BODY_READ_CHUNK]
            marks = ", ".join(f":e{n}" for n in range(len(part)))
            for event_id, body in (yield Query(
                f"SELECT id, body FROM events WHERE id IN ({marks})",
                {f"e{n}": event_id for n, event_id in enumerate(part)},
            )):
                read[event_id] = body
        return read

    def _extend_steps(
        self, now: float, lease_until: float, extend: Sequence[tuple[str, str]],
        per_endpoint: int, rows: int, known: Mapping[int, bytes],
    ) -> Steps[list[Unit]]:
        """Lease more due unordered rows of each URL to its running tokens: a URL's rows are
        shared among them as ``chunk_size`` shares them among new chunks (a full chunk each
        from a backlog, else an even share of the URL's slots), so the burst's tail does not
        end in a few long units."""
        where = LOOSE_PENDING_WHERE[self._dialect]
        lock = " FOR UPDATE SKIP LOCKED" if self._postgres else ""
        by_url: dict[str, list[str]] = {}
        for token, url in extend:
            by_url.setdefault(url, []).append(token)
        units: list[Unit] = []
        for url, tokens in by_url.items():
            found = yield Query(
                f"SELECT id, event_id, simulation_id, message_type, attempt_count "
                f"FROM webhook_deliveries{self._indexed_by('ix_deliveries_loose')} "
                f"WHERE {where} AND url = :url AND next_attempt_at <= :now "
                f"ORDER BY event_id LIMIT {len(tokens) * int(rows)}{lock}",
                {"url": url, "now": now})
            if not found:
                continue
            size = chunk_size(len(found), len(tokens), per_endpoint, rows)
            shares = [(token, found[n * size:(n + 1) * size]) for n, token in enumerate(tokens)]
            shares = [(token, share) for token, share in shares if share]
            yield from self._lease_steps(now, lease_until, [
                (token, [row[0] for row in share]) for token, share in shares])
            read = yield from self._bodies_steps(
                [row[1] for _token, share in shares for row in share if row[1] not in known])
            for token, share in shares:
                jobs = []
                for id_, event_id, simulation_id, message_type, attempt_count in share:
                    jobs.append(Job(id_, event_id, simulation_id, message_type, url,
                                    attempt_count, _body(event_id, known, read), False))
                units.append(Unit(token, lease_until, jobs))
        return units

    def _keys(self, column: str, where: str, index: str) -> Steps[list[Any]]:
        """The distinct values of ``column`` among the rows of the partial ``index`` (whose
        predicate is ``where``), by a skip scan (one index seek per value), not by reading
        every row."""
        table = "webhook_deliveries" + self._indexed_by(index)
        sql = (f"WITH RECURSIVE k(v) AS (SELECT MIN({column}) FROM {table} "
               f"WHERE {where} UNION ALL SELECT (SELECT MIN({column}) FROM {table} "
               f"WHERE {where} AND {column} > k.v) FROM k WHERE k.v IS NOT NULL) "
               "SELECT v FROM k WHERE v IS NOT NULL")
        return [r[0] for r in (yield Query(sql))]

    def _candidates(
        self, now: float, lane_rows: int, chunk_rows: dict[str, int],
        default_chunk_rows: int, busy_lanes: set[int], *, stale: bool,
    ) -> Steps[tuple[list[Row], dict[int, tuple[str, int]]]]:
        """The rows a plan can use, read through the partial indexes rather than every active
        row: the first ``lane_rows`` of each free simulation's ordered queue, and the oldest
        due unordered rows of each URL (``chunk_rows`` of it, or ``default_chunk_rows``); with
        each row's message type and attempt count. ``plan_units`` gives the same plan on
        these as on all active rows. Unordered rows whose lease ran out are read only when
        ``stale`` (the dispatcher asks on its poll: they wait at least a lease anyway)."""
        lane_where = LANE_ROWS_WHERE[self._dialect]
        loose_where = LOOSE_PENDING_WHERE[self._dialect]
        hint = self._indexed_by
        cols = ("id, simulation_id, url, event_id, ordered, status, next_attempt_at, "
                "lease_until, claim_token, message_type, attempt_count")
        parts: list[str] = []
        params: dict[str, Any] = {"now": now}
        lanes = yield from self._keys("simulation_id", lane_where, "ix_deliveries_lanes")
        free = [sim for sim in lanes if sim not in busy_lanes]
        for n, sim in enumerate(free):
            params[f"s{n}"] = sim
            parts.append(f"SELECT {cols} FROM webhook_deliveries{hint('ix_deliveries_lanes')} "
                         f"WHERE {lane_where} AND simulation_id = :s{n} "
                         f"ORDER BY event_id LIMIT {int(lane_rows)}")
        urls = yield from self._keys("url", loose_where, "ix_deliveries_loose")
        for n, url in enumerate(urls):
            rows = chunk_rows.get(url, default_chunk_rows)
            if rows > 0:
                params[f"u{n}"] = url
                parts.append(f"SELECT {cols} FROM webhook_deliveries{hint('ix_deliveries_loose')} "
                             f"WHERE {loose_where} AND url = :u{n} AND next_attempt_at <= :now "
                             f"ORDER BY event_id LIMIT {int(rows)}")
        if stale:
            parts.append(f"SELECT {cols} FROM webhook_deliveries WHERE status = 'delivering' "
                         f"AND lease_until < :now AND NOT ordered "
                         f"ORDER BY event_id LIMIT {int(default_chunk_rows)}")
        found: list[Row] = []
        extra: dict[int, tuple[str, int]] = {}
        # A few parts per statement: each is an index seek and a short range.
        for start in range(0, len(parts), CANDIDATE_PARTS):
            chunk = parts[start:start + CANDIDATE_PARTS]
            query = " UNION ALL ".join(f"SELECT * FROM ({part}) AS p{start + n}"
                                       for n, part in enumerate(chunk))
            for (id_, sim, url, event_id, ordered, status, next_at, lease, token, message_type,
                 attempt_count) in (yield Query(query, params)):
                found.append(Row(id_, sim, url, event_id, bool(ordered), status, next_at,
                                 lease, token))
                extra[id_] = (message_type, attempt_count)
        return found, extra

    async def renew(self, token: str, delivery_ids: Sequence[int], lease_until: float) -> bool:
        """Extend the lease of a unit's unsent deliveries; False if the unit is no longer ours
        (its lease ran out and another worker claimed it)."""
        if not delivery_ids:
            return True
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(D)
                .where(D.c.id.in_(list(delivery_ids)), D.c.claim_token == token,
                       D.c.status == "delivering")
                .values(lease_until=lease_until, updated_at=time.time())
            )
        return int(result.rowcount or 0) == len(delivery_ids)

    async def repoint(self, simulation_id: int, url: str) -> int:
        """Send the simulation's waiting deliveries to ``url``, the URL now in force."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(D)
                .where(D.c.simulation_id == simulation_id, D.c.status.in_(ACTIVE_STATES),
                       D.c.url != url)
                .values(url=url, updated_at=time.time())
            )
        return int(result.rowcount or 0)

    async def record(self, results: Sequence[Result]) -> None:
        """Write the outcome of many attempts in one transaction (one commit per batch)."""
        if not results:
            return
        now = time.time()
        await self._steps.run(lambda: self._record_steps(results, now))

    def _record_steps(self, results: Sequence[Result], now: float) -> Steps[None]:
        # Successes, the common case, take one statement run for many rows, the attempt
        # written on the delivery row: attempt_count + 1 equals the count the dispatcher
        # computed, since a leased row has one attempt in flight.
        ok = [r for r in results if r.status == "succeeded" and r.last_error is None]
        released = [r.delivery_id for r in results if r.status == RELEASE]
        skip = {r.delivery_id for r in ok} | set(released)
        rest = [r for r in results if r.delivery_id not in skip]
        healthy = {r.simulation_id for r in results
                   if r.status == "succeeded" and r.simulation_id is not None}
        if ok:
            rows = [(now, now, *r.success, r.delivery_id) if r.success is not None
                    else (now, now, None, None, None, None, r.delivery_id) for r in ok]
            if self._postgres:
                # One statement each for the whole batch: a statement per row costs a server
                # round of work per row on PostgreSQL (sqlite3 runs the rows in-process).
                columns = list(zip(*rows, strict=True))
                yield Query(_PG_KEEP_SUCCESS_SQL, {"ids": list(columns[6])})
                yield Query(_PG_SUCCESS_SQL, {
                    "now": now, "ids": list(columns[6]), "started": list(columns[2]),
                    "latency": list(columns[3]), "code": list(columns[4]),
                    "body": list(columns[5])})
            else:
                yield from self._sqlite_success_steps(rows)
        if released:
            yield Many(_RELEASE_SQL, [(now, delivery_id) for delivery_id in released])
        if healthy:
            # A success ends the endpoint's failing streak (see ``health``).
            yield Many(_HEALTHY_SQL, [(sim,) for sim in sorted(healthy)])
        if rest:
            yield Many(_RESULT_SQL, [(r.status, r.attempt_count, r.next_attempt_at,
                                      r.last_error, now, r.delivery_id) for r in rest])
            yield Many(_ATTEMPT_SQL, [
                (r.delivery_id, a["started_at"], a["latency_ms"], a["status_code"],
                 a["error_class"], a["error"], a["response_body"])
                for r in rest if (a := r.attempt) is not None
            ])

    def _sqlite_success_steps(self, rows: Sequence[tuple[Any, ...]]) -> Steps[None]:
        """Write successes (``_SUCCESS_SQL``'s parameter rows) on SQLite, an earlier success
        on a row (a replay, or a send repeated after a lease ran out) kept as an attempt."""
        ids = [row[6] for row in rows]
        if _FIRST_SUCCESS_VALUES_SQL is None or len(set(ids)) < len(ids):
            # Old SQLite, or a delivery twice in one batch (never, from one dispatcher): it
            # counts two attempts, a statement each, one after the other.
            yield Query(_KEEP_SUCCESS_SQL, {"ids": json.dumps(ids)})
            yield Many(_SUCCESS_SQL, rows)
            return
        # Rows holding no success, the common case: no statement to look for one.
        before = (yield Query("SELECT total_changes()"))[0][0]
        yield Many(_FIRST_SUCCESS_SQL, rows, _FIRST_SUCCESS_VALUES_SQL)
        if (yield Query("SELECT total_changes()"))[0][0] - before == len(rows):
            return
        # A row left as it was holds an earlier success (a row written above holds this
        # attempt's start, or none): keep it as an attempt, then write this one.
        held = dict((yield Query(_SUCCESS_HELD_SQL, {"ids": json.dumps(ids)})))
        again = [row for row in rows
                 if (started := held.get(row[6])) is not None and started != row[2]]
        if again:
            yield Query(_KEEP_SUCCESS_SQL, {"ids": json.dumps([row[6] for row in again])})
            yield Many(_SUCCESS_SQL, again, _SUCCESS_VALUES_SQL)

    async def release(self, delivery_ids: Sequence[int]) -> None:
        """Give leased deliveries back (due now) when a dispatcher stops before sending them."""
        if not delivery_ids:
            return
        async with self._engine.begin() as conn:
            await conn.execute(
                update(D)
                .where(D.c.id.in_(list(delivery_ids)), D.c.status == "delivering")
                .values(status="pending", lease_until=None, claim_token=None,
                        updated_at=time.time())
            )

    async def disable_pending(self, simulation_id: int, reason: str) -> int:
        """Mark the simulation's waiting deliveries ``disabled`` (its endpoint was disabled)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(D)
                .where(D.c.simulation_id == simulation_id, D.c.status == "pending")
                .values(status="disabled", last_error=reason, updated_at=time.time())
            )
        return int(result.rowcount or 0)

    async def retry(self, simulation_id: int, delivery_id: int) -> bool | None:
        """Queue one delivery again, now; None when it does not exist, False when in flight."""
        now = time.time()
        async with self._engine.begin() as conn:
            status = await conn.scalar(
                select(D.c.status).where(D.c.id == delivery_id, D.c.simulation_id == simulation_id)
            )
            if status is None:
                return None
            if status == "delivering":
                return False
            await conn.execute(
                update(D)
                .where(D.c.id == delivery_id)
                .values(status="pending", next_attempt_at=now, lease_until=None,
                        claim_token=None, updated_at=now)
            )
        return True

    async def retry_failed(self, simulation_id: int) -> int:
        """Queue every failed or disabled delivery of the simulation again (bulk replay)."""
        now = time.time()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(D)
                .where(D.c.simulation_id == simulation_id, D.c.status.in_(("failed", "disabled")))
                .values(status="pending", next_attempt_at=now, lease_until=None, updated_at=now)
            )
        return int(result.rowcount or 0)

    async def list(
        self,
        simulation_id: int,
        *,
        status: str | None,
        message_type: str | None,
        limit: int,
        offset: int,
    ) -> tuple[list[dict[str, Any]], int]:
        """Deliveries of a simulation, newest first, each with its attempts; and the total."""
        conds = [D.c.simulation_id == simulation_id]
        if status:
            conds.append(D.c.status == status)
        if message_type:
            conds.append(D.c.message_type == message_type)
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(D).where(*conds).order_by(D.c.id.desc()).limit(limit).offset(offset)
                )
            ).mappings().all()
            total = await conn.scalar(select(func.count()).select_from(D).where(*conds))
            ids = [row["id"] for row in rows]
            attempts: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
            if ids:
                for att in (
                    await conn.execute(
                        select(A).where(A.c.delivery_id.in_(ids)).order_by(A.c.id)
                    )
                ).mappings():
                    attempts[att["delivery_id"]].append(dict(att))
        return [_with_attempts(row, attempts[row["id"]]) for row in rows], int(total or 0)

    async def get(self, simulation_id: int, delivery_id: int) -> dict[str, Any] | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(D).where(D.c.id == delivery_id, D.c.simulation_id == simulation_id)
                )
            ).mappings().first()
            if row is None:
                return None
            attempts = [
                dict(a)
                for a in (
                    await conn.execute(
                        select(A).where(A.c.delivery_id == delivery_id).order_by(A.c.id)
                    )
                ).mappings()
            ]
        return _with_attempts(row, attempts)

    async def newest_id(self) -> int:
        """The highest delivery id in the outbox (0 when empty): the last entry of the
        primary key. A new row raises it, unless purges have emptied the top of the table
        (SQLite then gives those ids out again)."""
        async with self._engine.connect() as conn:
            newest = await conn.scalar(text(NEWEST_ID_SQL))
        return int(newest or 0)

    async def depth(self) -> int:
        """Deliveries pending or in flight (the queue-depth gauge): three counts, each read
        from a partial index (``active_delivery_wheres``), not a scan of the outbox."""
        counts = " + ".join(f"(SELECT count(*) FROM webhook_deliveries WHERE {where})"
                            for where in active_delivery_wheres(self._dialect))
        async with self._engine.connect() as conn:
            count = await conn.scalar(text(f"SELECT {counts}"))
        return int(count or 0)

    async def purge_older_than(self, cutoff: float) -> int:
        """Remove finished deliveries last changed before ``cutoff``, with their attempts.

        Only rows created before ``cutoff`` can qualify (a row changes after it is
        created), and ids rise with creation: the candidates are the ids below the first
        row created since, read by id from the oldest, not by a scan of the whole outbox.
        """
        async with self._engine.begin() as conn:
            bound = await conn.scalar(first_id_since(D, cutoff))
            old = select(D.c.id).where(D.c.status.in_(TERMINAL_STATES), D.c.updated_at < cutoff)
            if bound is not None:
                old = old.where(D.c.id < bound)
            await conn.execute(delete(A).where(A.c.delivery_id.in_(old)))
            result = await conn.execute(delete(D).where(D.c.id.in_(old)))
            # Failing clocks not moved since (a deleted simulation's, say): with the default
            # retention (a week) that is far past the quiet gap, so no decision changes; a
            # retention shorter than the quiet gap would end such a streak early.
            await conn.execute(delete(E).where(E.c.last_failure_at < cutoff))
        return int(result.rowcount or 0)


__all__ = ["RELEASE", "STATES", "Job", "Outbox", "Result", "Unit"]
