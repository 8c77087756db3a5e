"""The webhook outbox's one owner: every statement on ``webhook_deliveries`` and
``webhook_attempts``, per dialect in one object.

Nothing else in the tree writes SQL on these tables (``tests/test_layering.py`` checks it):
the event log inserts its rows with ``insert``, its retention keeps the events named by
``ACTIVE_EVENT_IDS``; the webhook package's claim, record and delivery-log modules run the
statements below in their transactions (``store.txsteps``); the outbox watch reads
``NEWEST_ID_SQL``; ``tables.py`` builds the partial indexes from the predicates here.

SQLite and PostgreSQL differ in a few statements only (array parameters against JSON arrays,
row locks, index hints); those differences are the two subclasses of ``OutboxSql``, chosen
once by ``outbox_sql(dialect)``, never an ``if`` in a caller.

Which claim each statement must hold is the table in docs/webhooks.md ("Who may write a
delivery"): every statement that records, releases, renews or repoints a leased row names
the claim token it holds (``WHERE claim_token = :t AND status = 'delivering'``), so the
write of a worker whose lease ran out changes nothing. The rows of an ordered unit but its
last stay pending while they are sent (the last row is the lane's lease): a result of one
of them is written only if the row is still pending and ``lanes_held`` found the token's
lane lease held and unexpired, before the transaction's first write.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence, Set
from typing import Any, TypeVar

from .txsteps import Many, Query, Steps

T = TypeVar("T")

# ---- the partial indexes' predicates ----------------------------------------------------
# A query uses a partial index only when its WHERE holds the same literal terms (SQLite does
# not prove that a bound parameter implies them), so the claims are built from these strings.
LANE_ROWS_WHERE = {
    "sqlite": "status IN ('pending', 'delivering') AND ordered = 1",
    "postgresql": "status IN ('pending', 'delivering') AND ordered",
}
# Leased rows (in flight), by claim token: a claim counts the units in flight with one index
# seek per unit, not by reading every leased row.
LEASED_WHERE = "status = 'delivering'"
LOOSE_PENDING_WHERE = {
    "sqlite": "status = 'pending' AND ordered = 0",
    "postgresql": "status = 'pending' AND NOT ordered",
}
LOOSE_LEASED_WHERE = {
    "sqlite": f"{LEASED_WHERE} AND ordered = 0",
    "postgresql": f"{LEASED_WHERE} AND NOT ordered",
}

# Deliveries that ended without success, by simulation: the delivery log's count and pages of
# a failed or disabled filter read these few rows, not the simulation's whole history. No
# row on the hot path enters it (a success never matches).
ENDED_WHERE = "status IN ('failed', 'disabled')"

ACTIVE_STATES = ("pending", "delivering")
TERMINAL_STATES = ("succeeded", "failed", "disabled")
STATES = (*ACTIVE_STATES, *TERMINAL_STATES)

# The newest delivery id: the last entry of the primary key (the outbox watch's readers).
NEWEST_ID_SQL = "SELECT max(id) FROM webhook_deliveries"
# The columns the event log's group commit writes, in the order of its row tuples.
INSERT_COLUMNS = ("event_id", "simulation_id", "message_type", "url", "status",
                  "attempt_count", "next_attempt_at", "created_at", "updated_at", "ordered")
# What a statement that writes a leased row must find: the row still leased to the token it
# names. A worker whose lease ran out (and whose rows another worker took) changes nothing.
HELD = "claim_token = ? AND status = 'delivering'"
# An ordered unit is leased by its last row only (the lane's lease, ``Claimer.claim``); its
# other rows stay pending while it sends them. A result of one of those is written where
# the row is still pending and the caller found its lane lease held, unexpired, at the start
# of the transaction (``OutboxSql.lanes_held``; the bound ``lane`` flag says so).
HELD_OR_LANE = (f"(({HELD}) OR (status = 'pending' AND ordered = 1 AND ? = 1))")
_ROW_COLUMNS = ("id, event_id, simulation_id, message_type, url, status, attempt_count, "
                "next_attempt_at, lease_until, created_at, updated_at, last_error, "
                "ordered, claim_token, success_started_at, success_latency_ms, "
                "success_status_code, success_response_body")
ROW_FIELDS = tuple(name.strip() for name in _ROW_COLUMNS.split(","))
_ATTEMPT_COLUMNS = ("id, delivery_id, started_at, latency_ms, status_code, error_class, "
                    "error, response_body")
ATTEMPT_FIELDS = tuple(name.strip() for name in _ATTEMPT_COLUMNS.split(","))
BODY_READ_CHUNK = 500  # event ids per read of bodies (well under SQLite's variable limit)
ID_READ_CHUNK = 500  # delivery ids per read of attempts

# ---- statements the same on both dialects ----------------------------------------------
SUCCESS_SQL = ("UPDATE webhook_deliveries SET status = 'succeeded', "
               "attempt_count = attempt_count + 1, next_attempt_at = ?, last_error = NULL, "
               "lease_until = NULL, claim_token = NULL, updated_at = ?, "
               "success_started_at = ?, success_latency_ms = ?, success_status_code = ?, "
               f"success_response_body = ? WHERE id = ? AND {HELD_OR_LANE}")
"""A success, written on the delivery row itself (one write per delivered event). Parameters:
next_attempt_at, updated_at, started, latency, code, body, id, token, lane (1: the token's
lane lease is held, so a pending row of its unit may be written; 0 otherwise)."""
SUCCESS_VALUES_SQL = (
    "WITH u(next_at, updated, started, latency, code, body, id, token, lane) AS ({values}) "
    "UPDATE webhook_deliveries SET status = 'succeeded', "
    "attempt_count = attempt_count + 1, next_attempt_at = u.next_at, last_error = NULL, "
    "lease_until = NULL, claim_token = NULL, updated_at = u.updated, "
    "success_started_at = u.started, success_latency_ms = u.latency, "
    "success_status_code = u.code, success_response_body = u.body "
    "FROM u WHERE webhook_deliveries.id = u.id AND ((webhook_deliveries.claim_token = u.token "
    "AND webhook_deliveries.status = 'delivering') OR (webhook_deliveries.status = 'pending' "
    "AND webhook_deliveries.ordered = 1 AND u.lane = 1))"
) if sqlite3.sqlite_version_info >= (3, 33, 0) else None
"""``SUCCESS_SQL`` for many rows per statement on SQLite (``Many``'s ``values``; UPDATE ...
FROM needs SQLite 3.33)."""
_RELEASE_SQL = ("UPDATE webhook_deliveries SET status = 'pending', lease_until = NULL, "
                f"claim_token = NULL, updated_at = ? WHERE id = ? AND {HELD}")
_RESULT_SQL = ("UPDATE webhook_deliveries SET status = :status, attempt_count = :count, "
               "next_attempt_at = :next_at, last_error = :error, lease_until = NULL, "
               "claim_token = NULL, updated_at = :now WHERE id = :id "
               "AND ((claim_token = :token AND status = 'delivering') OR (status = 'pending' "
               "AND ordered = {true} AND :lane = 1)) RETURNING id")
_ATTEMPT_SQL = ("INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, "
                "status_code, error_class, error, response_body) VALUES (?, ?, ?, ?, ?, ?, ?)")
# An ordered unit's lease (its last row) is renewed only while it has not run out: once it
# has, another worker may hold the lane with a unit that leaves this row out (a replayed
# delivery put ahead of it), and a renewal would put two units of one lane in flight.
# An unordered row whose lease ran out is renewed while no other claim took it.
_RENEW_SQL = ("UPDATE webhook_deliveries SET lease_until = :lease, updated_at = :now "
              "WHERE claim_token = :token AND status = 'delivering' "
              "AND (lease_until >= :now OR ordered = {false}) RETURNING id")
# A URL change: the simulation's waiting rows, and the rows the caller's claim holds, go to
# the URL in force; rows another worker holds are left to it.
_REPOINT_SQL = ("UPDATE webhook_deliveries SET url = :url, updated_at = :now "
                "WHERE simulation_id = :sim AND url <> :url AND (status = 'pending' OR "
                "(status = 'delivering' AND claim_token = :token))")
# A replay is a fresh schedule (attempt_count back to 0, as Svix does); a row in flight is
# left to its sender.
_REPLAY_SQL = ("UPDATE webhook_deliveries SET status = 'pending', attempt_count = 0, "
               "next_attempt_at = :now, lease_until = NULL, claim_token = NULL, "
               "updated_at = :now WHERE id = :id AND simulation_id = :sim "
               "AND status <> 'delivering' RETURNING id")
_STATUS_SQL = "SELECT status FROM webhook_deliveries WHERE id = :id AND simulation_id = :sim"
_REPLAY_FAILED_SQL = ("UPDATE webhook_deliveries SET status = 'pending', attempt_count = 0, "
                      "next_attempt_at = :now, lease_until = NULL, claim_token = NULL, "
                      "updated_at = :now WHERE simulation_id = :sim "
                      "AND status IN ('failed', 'disabled') RETURNING id")
_DISABLE_SQL = ("UPDATE webhook_deliveries SET status = 'disabled', last_error = :reason, "
                "updated_at = :now WHERE simulation_id = :sim AND status = 'pending' "
                "RETURNING id")
_SUCCESS_HELD_SQL = ("SELECT id, success_started_at FROM webhook_deliveries "
                     "WHERE id IN (SELECT value FROM json_each(:ids))")
_KEEP_ONE_SUCCESS_SQL = (
    "INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, status_code, "
    "error_class, error, response_body) SELECT id, success_started_at, success_latency_ms, "
    "success_status_code, NULL, NULL, success_response_body FROM webhook_deliveries "
    f"WHERE id = ? AND {HELD_OR_LANE} AND success_started_at IS NOT NULL")
# Units in flight: one row per unit (claim token) holding a lease, not one per leased
# delivery, read by a skip scan of ``ix_deliveries_leased``; rows leased with no token
# (written before claim tokens) are a unit each.
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
# PostgreSQL: one row of each unit read by a LATERAL LIMIT 1 (an index read per unit,
# whatever the planner's statistics). Written as ``_IN_FLIGHT_SQL``'s join on a subquery,
# a table without statistics (autovacuum off, or not yet run) was planned as a hash join
# over a sequential scan of every delivery, on each claim. The tokens are walked from the
# highest down, and a unit's entries from its latest lease: the entries of a unit's rows
# already answered (dead versions until vacuum removes them) hold its earliest leases, and
# an ascending walk met them before a live one. The walk still reads the dead entries of
# units that have ended (docs/performance.md).
_IN_FLIGHT_LATERAL_SQL = (
    "WITH RECURSIVE k(t) AS (SELECT MAX(claim_token) FROM webhook_deliveries "
    "WHERE status = 'delivering' UNION ALL SELECT (SELECT MAX(claim_token) "
    "FROM webhook_deliveries WHERE status = 'delivering' AND claim_token < k.t) "
    "FROM k WHERE k.t IS NOT NULL) "
    "SELECT d.url, d.simulation_id, d.ordered, d.claim_token, d.id FROM k "
    "CROSS JOIN LATERAL (SELECT url, simulation_id, ordered, claim_token, id "
    "FROM webhook_deliveries WHERE status = 'delivering' AND claim_token = k.t "
    "AND lease_until >= :now ORDER BY lease_until DESC LIMIT 1) AS d WHERE k.t IS NOT NULL "
    "UNION ALL SELECT url, simulation_id, ordered, claim_token, id "
    "FROM webhook_deliveries WHERE status = 'delivering' AND claim_token IS NULL "
    "AND lease_until >= :now"
)
_CANDIDATE_COLUMNS = ("id, simulation_id, url, event_id, ordered, status, next_attempt_at, "
                      "lease_until, claim_token, message_type, attempt_count")
# Index range reads (a lane's head, a URL's first due rows) per statement of a claim.
CANDIDATE_PARTS = 64
# The order a URL's unordered rows are taken in: as they came due (a new delivery is due when
# stored, a retry when its delay has run), the order of ``ix_deliveries_loose``: a claim
# reads only the rows due now, however many of the URL's rows wait for a retry (a receiver
# down for hours leaves every delivery of those hours waiting; docs/performance.md).
DUE_ORDER = "next_attempt_at, event_id"


class OutboxSql:
    """The outbox's statements on SQLite; ``PostgresOutboxSql`` overrides what differs."""

    dialect = "sqlite"
    true, false = "1", "0"  # boolean literals compared with ``ordered``

    def __init__(self) -> None:
        self.result_sql = _RESULT_SQL.format(true=self.true)
        self.renew_sql = _RENEW_SQL.format(false=self.false)
        self.lane_where = LANE_ROWS_WHERE[self.dialect]
        self.loose_where = LOOSE_PENDING_WHERE[self.dialect]
        self.in_flight_sql = _IN_FLIGHT_SQL.format(hint=self.hint("ix_deliveries_leased"))
        self.insert = (f"INSERT INTO webhook_deliveries ({', '.join(INSERT_COLUMNS)}) "
                       f"VALUES ({', '.join('?' * len(INSERT_COLUMNS))})")
        """The event log's INSERT of one row (``INSERT_COLUMNS``, ``?`` placeholders)."""
        self.insert_values = (f"INSERT INTO webhook_deliveries ({', '.join(INSERT_COLUMNS)}) "
                              "{values}")
        """The same with ``{values}`` for many rows (``Many``'s ``values``)."""

    def hint(self, index: str) -> str:
        """SQLite's planner may pick another index and sort: it is told the partial
        ``index``; PostgreSQL finds it by itself."""
        return f" INDEXED BY {index}"

    fence = ""
    """What ends a subquery so that the planner pushes no outer condition into it
    (PostgreSQL's ``OFFSET 0``; SQLite's ``INDEXED BY`` already fixes the index read)."""

    @property
    def active_wheres(self) -> tuple[str, str, str]:
        """Three disjoint predicates whose union is the deliveries still to send, each read
        from a partial index: ordered rows (the lanes), unordered rows waiting, unordered
        rows in flight."""
        return (LANE_ROWS_WHERE[self.dialect], LOOSE_PENDING_WHERE[self.dialect],
                LOOSE_LEASED_WHERE[self.dialect])

    @property
    def active_indexes(self) -> tuple[str, str, str]:
        """The partial index of each of ``active_wheres``, in the same order."""
        return ("ix_deliveries_lanes", "ix_deliveries_loose", "ix_deliveries_leased")

    @property
    def simulation_indexes(self) -> tuple[str, str, str]:
        """The partial index each of ``active_wheres`` is read from for one simulation: the
        lanes' and the waiting unordered rows' are keyed by simulation; the unordered rows in
        flight are read from theirs whole (keyed by token, bounded by what the workers
        hold in memory)."""
        return ("ix_deliveries_lanes", "ix_deliveries_loose_sim", "ix_deliveries_leased")

    def active_rows(self, parts: Sequence[int], *, of_simulation: bool,
                    columns: str = "*") -> str:
        """A SELECT of ``columns`` of the rows of ``active_wheres[n]`` for each ``n`` in
        ``parts`` (with ``of_simulation``, only those of simulation ``:sim``, read from
        ``simulation_indexes``), each read from its partial index alone, so that neither a
        simulation's long history nor another simulation's backlog is read (a receiver down
        for hours leaves millions of rows waiting). The unordered rows in flight are read
        whole, filtered by ``simulation_id + 0`` so that no other index serves the test, and
        ``fence`` keeps a caller's conditions out of each read (PostgreSQL otherwise
        combined them with ix_deliveries_sim, SQLite read ix_deliveries_sim instead;
        tests/webhooks/test_plans.py)."""
        reads = []
        for n in parts:
            index, of_sim = self.active_indexes[n], ""
            if of_simulation:
                index = self.simulation_indexes[n]
                of_sim = " AND simulation_id + 0 = :sim" if n == 2 else " AND simulation_id = :sim"
            reads.append(f"SELECT * FROM (SELECT {columns} FROM webhook_deliveries"
                         f"{self.hint(index)} WHERE {self.active_wheres[n]}{of_sim}{self.fence})"
                         f" AS a{n}")
        return " UNION ALL ".join(reads)

    @property
    def active_event_ids(self) -> str:
        """A SELECT of the event ids an unfinished delivery still needs (event retention
        keeps them)."""
        return " UNION ALL ".join(f"SELECT event_id FROM webhook_deliveries WHERE {where}"
                                  for where in self.active_wheres)

    @property
    def depth_sql(self) -> str:
        """Deliveries pending or in flight: three counts, each from a partial index."""
        counts = " + ".join(f"(SELECT count(*) FROM webhook_deliveries WHERE {where})"
                            for where in self.active_wheres)
        return f"SELECT {counts}"

    # ---- claiming ------------------------------------------------------------------------

    def begin_claim(self, writes_first: bool) -> Steps[None]:
        """Open a claim: SQLite takes its one write lock now (unless the transaction's first
        statement writes anyway), so nothing below reads a state another writer changes."""
        if not writes_first:
            yield Query("UPDATE webhook_deliveries SET claim_token = NULL WHERE id = -1")

    def hold(self) -> Steps[None]:
        """The first step of a worker's transaction that writes deliveries outside a claim
        (a renewal, a release, a record, a repoint): PostgreSQL ends it if the worker stops
        inside it (``PostgresOutboxSql``); SQLite has nothing to do (one process's writer)."""
        if False:  # pragma: no cover - a generator with no step
            yield Query("")

    def held(self, steps: Steps[T]) -> Steps[T]:
        """``steps`` as a transaction of their own, opened by ``hold``."""
        yield from self.hold()
        return (yield from steps)

    ends_stalled = False
    """Whether ``end_stalled`` does anything on this store (PostgreSQL only)."""

    def end_stalled(self, hold_s: float) -> Steps[int]:
        """End the sessions of stalled ridecast processes caught in the middle of a
        statement with rows locked (``PostgresOutboxSql``); how many. SQLite has none: one
        process writes."""
        if False:  # pragma: no cover - a generator with no step
            yield Query("")
        return 0

    def lock_urls(self, urls: Sequence[str]) -> Steps[set[str]]:
        """The URLs whose slots this transaction may plan: on SQLite all of them (the
        transaction holds the database's one write lock)."""
        if False:  # pragma: no cover - a generator with no step
            yield Query("")
        return set(urls)

    def in_flight_query(self, now: float) -> Query:
        """The units in flight at ``now``: rows of (url, simulation_id, ordered,
        claim_token, id of one of its rows), one per unit."""
        return Query(self.in_flight_sql, {"now": now})

    def in_flight_after_lock(self, now: float) -> Steps[list[tuple[Any, ...]] | None]:
        """The units in flight again once ``lock_urls`` holds its URLs, or None when
        nothing can have changed since the first count (SQLite: one writer)."""
        if False:  # pragma: no cover - a generator with no step
            yield Query("")
        return None

    def take(self, now: float, lease_until: float,
             units: Sequence[tuple[str, Sequence[int]]]) -> Steps[set[int]]:
        """Lease each unit's deliveries (claim token, delivery ids) that are still free
        (pending, or leased by a lease that ran out before ``now``); the ids leased. SQLite:
        read in this very transaction, under its write lock, so all of them."""
        yield from self.lease(now, lease_until, units)
        return {delivery_id for _token, ids in units for delivery_id in ids}

    def keys(self, column: str, where: str, index: str) -> Steps[list[Any]]:
        """The distinct values of ``column`` among the rows of the partial ``index`` (whose
        predicate is ``where``), by a skip scan: one index seek per value."""
        sql = (f"WITH RECURSIVE {self.keys_cte('k', column, where, index)} "
               "SELECT v FROM k WHERE v IS NOT NULL")
        return [r[0] for r in (yield Query(sql))]

    def keys_cte(self, name: str, column: str, where: str, index: str) -> str:
        """``keys``' skip scan as a recursive CTE ``name(v)`` (its last row is NULL)."""
        table = "webhook_deliveries" + self.hint(index)
        return (f"{name}(v) AS (SELECT MIN({column}) FROM {table} WHERE {where} UNION ALL "
                f"SELECT (SELECT MIN({column}) FROM {table} WHERE {where} AND {column} > "
                f"{name}.v) FROM {name} WHERE {name}.v IS NOT NULL)")

    def lane_head(self, n: int, rows: int) -> str:
        """The first ``rows`` active rows of the lane of simulation ``:s{n}``."""
        return (f"SELECT {_CANDIDATE_COLUMNS} FROM webhook_deliveries"
                f"{self.hint('ix_deliveries_lanes')} WHERE {self.lane_where} "
                f"AND simulation_id = :s{n} ORDER BY event_id LIMIT {int(rows)}")

    def url_head(self, n: int, rows: int) -> str:
        """The first ``rows`` unordered rows of URL ``:u{n}`` to have come due (``DUE_ORDER``)."""
        return (f"SELECT {_CANDIDATE_COLUMNS} FROM webhook_deliveries"
                f"{self.hint('ix_deliveries_loose')} WHERE {self.loose_where} "
                f"AND url = :u{n} AND next_attempt_at <= :now ORDER BY {DUE_ORDER} "
                f"LIMIT {int(rows)}")

    def stale_rows(self, rows: int) -> str:
        """Unordered rows whose lease ran out (a dead or stalled worker's)."""
        return (f"SELECT {_CANDIDATE_COLUMNS} FROM webhook_deliveries "
                f"WHERE status = 'delivering' AND lease_until < :now AND NOT ordered "
                f"ORDER BY event_id LIMIT {int(rows)}")

    def candidates(self, parts: Sequence[str], params: dict[str, Any],
                   ) -> Steps[list[tuple[Any, ...]]]:
        """The rows of many head reads (``lane_head``, ``url_head``, ``stale_rows``), a
        few reads per statement."""
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(parts), CANDIDATE_PARTS):
            chunk = parts[start:start + CANDIDATE_PARTS]
            query = " UNION ALL ".join(f"SELECT * FROM ({part}) AS p{start + n}"
                                       for n, part in enumerate(chunk))
            found += (yield Query(query, params))
        return found

    def heads(self, now: float, lane_rows: int, chunk_rows: Mapping[str, int],
              default_chunk_rows: int, busy_lanes: Set[int], *, stale: bool,
              ) -> Steps[list[tuple[Any, ...]]]:
        """The rows a claim plans with (``_CANDIDATE_COLUMNS``), read through the partial
        indexes rather than every active row: the first ``lane_rows`` of each ordered lane
        not in ``busy_lanes``, the first unordered rows of each URL to have come due
        (``chunk_rows`` of it, or ``default_chunk_rows``; ``DUE_ORDER``), and with ``stale``
        the unordered rows whose lease ran out. Here the lanes and URLs are read first, then
        their heads."""
        parts: list[str] = []
        params: dict[str, Any] = {"now": now}
        lanes = yield from self.keys("simulation_id", self.lane_where, "ix_deliveries_lanes")
        for n, sim in enumerate(s for s in lanes if s not in busy_lanes):
            params[f"s{n}"] = sim
            parts.append(self.lane_head(n, lane_rows))
        urls = yield from self.keys("url", self.loose_where, "ix_deliveries_loose")
        for n, url in enumerate(urls):
            rows = chunk_rows.get(url, default_chunk_rows)
            if rows > 0:
                params[f"u{n}"] = url
                parts.append(self.url_head(n, rows))
        if stale:
            parts.append(self.stale_rows(default_chunk_rows))
        return (yield from self.candidates(parts, params))

    def free_url_rows(self, url: str, now: float, rows: int) -> Steps[list[tuple[Any, ...]]]:
        """The first due unordered rows of ``url`` (``DUE_ORDER``; to extend a running
        chunk), locked."""
        found: list[tuple[Any, ...]] = yield Query(
            f"SELECT id, event_id, simulation_id, message_type, attempt_count "
            f"FROM webhook_deliveries{self.hint('ix_deliveries_loose')} "
            f"WHERE {self.loose_where} AND url = :url AND next_attempt_at <= :now "
            f"ORDER BY {DUE_ORDER} LIMIT {int(rows)}{self.skip_locked}",
            {"url": url, "now": now})
        return found

    skip_locked = ""

    def lease(self, now: float, lease_until: float,
              units: Sequence[tuple[str, Sequence[int]]]) -> Steps[None]:
        """Lease each unit's deliveries (claim token, delivery ids) to its token: only rows
        still pending, or leased by a lease that ran out before ``now``."""
        yield Many(
            "UPDATE webhook_deliveries SET status = 'delivering', lease_until = ?, "
            "claim_token = ?, updated_at = ? WHERE id IN (SELECT value FROM json_each(?)) "
            "AND (status = 'pending' OR (status = 'delivering' AND lease_until < ?))",
            [(lease_until, token, now, json.dumps(list(ids)), now) for token, ids in units])

    def bodies(self, event_ids: Sequence[int]) -> Steps[dict[int, bytes]]:
        """The bodies of ``event_ids`` from the event log (those retention left)."""
        read: dict[int, bytes] = {}
        for start in range(0, len(event_ids), BODY_READ_CHUNK):
            part = event_ids[start:start + BODY_READ_CHUNK]
            marks = ", ".join(f":e{n}" for n in range(len(part)))
            for event_id, body in (yield Query(
                f"SELECT id, body FROM events WHERE id IN ({marks})",
                {f"e{n}": event_id for n, event_id in enumerate(part)},
            )):
                read[event_id] = bytes(body)
        return read

    # ---- recording -----------------------------------------------------------------------

    def successes(self, rows: Sequence[tuple[Any, ...]]) -> Steps[None]:
        """Write successes (``SUCCESS_SQL``'s parameter rows), each only where its token
        still holds the row, or holds the lane of a pending row (the row's ``lane`` flag);
        an earlier success on a row (a replay, or a send repeated after a lease ran out) is
        kept as an attempt first."""
        ids = [row[6] for row in rows]
        if SUCCESS_VALUES_SQL is None or len(set(ids)) < len(ids):
            # Old SQLite, or a delivery twice in one batch (never, from one dispatcher).
            yield Many(_KEEP_ONE_SUCCESS_SQL, [row[6:9] for row in rows])
            yield Many(SUCCESS_SQL, rows)
            return
        # Rows holding no success, the common case: no statement to look for one.
        before = (yield Query("SELECT total_changes()"))[0][0]
        yield Many(SUCCESS_SQL + " AND success_started_at IS NULL", rows,
                   SUCCESS_VALUES_SQL + " AND webhook_deliveries.success_started_at IS NULL")
        if (yield Query("SELECT total_changes()"))[0][0] - before == len(rows):
            return
        # A row left as it was holds an earlier success, or is no longer this claim's (the
        # guarded statements below then change nothing on it).
        held = dict((yield Query(_SUCCESS_HELD_SQL, {"ids": json.dumps(ids)})))
        again = [row for row in rows
                 if (started := held.get(row[6])) is not None and started != row[2]]
        if again:
            yield Many(_KEEP_ONE_SUCCESS_SQL, [row[6:9] for row in again])
            yield Many(SUCCESS_SQL, again, SUCCESS_VALUES_SQL)

    def releases(self, now: float, held: Sequence[tuple[int, str]]) -> Steps[None]:
        """Give leased rows (id, token) back, due now, where the token still holds them."""
        yield Many(_RELEASE_SQL, [(now, delivery_id, token) for delivery_id, token in held])

    def result(self, now: float, delivery_id: int, token: str, status: str, count: int,
               next_at: float, error: str | None, *, lane: bool = False) -> Steps[bool]:
        """Write an outcome other than a success; False when the token no longer holds the
        row, nor (``lane``: ``lanes_held`` found the token's lane lease) the lane of this
        pending row (nothing written)."""
        changed = yield Query(self.result_sql, {
            "status": status, "count": count, "next_at": next_at, "error": error,
            "now": now, "id": delivery_id, "token": token, "lane": int(lane)})
        return bool(changed)

    def lanes_held(self, tokens: Sequence[str], now: float) -> Steps[set[str]]:
        """Those of ``tokens`` that are ordered units still leasing a row whose lease has not
        run out: their lanes (the pending rows of such a unit may be written under it, in
        this transaction; an unordered unit's rows are each leased, and need no lane).
        SQLite: the transaction holds the one write lock, so this stays true until it
        commits."""
        if not tokens:
            return set()
        found = yield Query(
            "SELECT DISTINCT claim_token FROM webhook_deliveries"
            f"{self.hint('ix_deliveries_leased')} WHERE status = 'delivering' "
            "AND claim_token IN (SELECT value FROM json_each(:tokens)) "
            "AND lease_until >= :now AND ordered = 1",
            {"tokens": json.dumps(sorted(tokens)), "now": now})
        return {row[0] for row in found}

    def attempts(self, rows: Sequence[tuple[Any, ...]]) -> Steps[None]:
        """Insert attempt rows (delivery_id, started_at, latency_ms, status_code,
        error_class, error, response_body)."""
        if rows:
            yield Many(_ATTEMPT_SQL, rows)

    def renew(self, token: str, now: float, lease_until: float) -> Steps[set[int]]:
        """Extend the lease of every row ``token`` still holds; their ids. On PostgreSQL, rows
        another transaction has locked are left as they are (``PostgresOutboxSql``)."""
        found = yield Query(self.renew_sql, {"lease": lease_until, "now": now,
                                             "token": token})
        return {row[0] for row in found}

    def repoint(self, simulation_id: int, url: str, token: str, now: float) -> Steps[None]:
        """Point the simulation's waiting rows, and those ``token`` holds, at ``url``."""
        yield Query(_REPOINT_SQL, {"url": url, "now": now, "sim": simulation_id,
                                   "token": token})

    # ---- the delivery log ----------------------------------------------------------------

    def replay(self, simulation_id: int, delivery_id: int, now: float) -> Steps[bool | None]:
        """Queue one delivery again on a fresh schedule; None when it does not exist, False
        when it is in flight (left to its sender)."""
        if (yield Query(_REPLAY_SQL, {"id": delivery_id, "sim": simulation_id, "now": now})):
            return True
        status = yield Query(_STATUS_SQL, {"id": delivery_id, "sim": simulation_id})
        return None if not status else False

    def replay_failed(self, simulation_id: int, now: float) -> Steps[int]:
        """Queue every failed or disabled delivery of the simulation again, on a fresh
        schedule each."""
        return len((yield Query(_REPLAY_FAILED_SQL, {"sim": simulation_id, "now": now})))

    def disable_pending(self, simulation_id: int, reason: str, now: float) -> Steps[int]:
        """Mark the simulation's waiting deliveries ``disabled``."""
        return len((yield Query(_DISABLE_SQL, {"sim": simulation_id, "reason": reason,
                                               "now": now})))

    def page(self, simulation_id: int, *, status: str | None, message_type: str | None,
             before: int | None, limit: int, offset: int = 0,
             ) -> Steps[list[dict[str, Any]]]:
        """Deliveries of a simulation, newest first, below id ``before`` when given."""
        conds, params = self._filters(simulation_id, status, message_type, before)
        params.update(limit=limit, offset=offset)
        rows = yield Query(f"SELECT {_ROW_COLUMNS} FROM {self._log_rows(status)} "
                           f"WHERE {' AND '.join(conds)} ORDER BY d.id DESC LIMIT :limit "
                           "OFFSET :offset", params)
        return [dict(zip(ROW_FIELDS, row, strict=True)) for row in rows]

    def page_sizes(self, simulation_id: int, *, status: str | None,
                   message_type: str | None, before: int | None, limit: int,
                   offset: int = 0) -> Steps[list[tuple[int, int]]]:
        """(id, characters of its text columns and of its attempts') for the rows ``page``
        would return: a page is sized before it is loaded."""
        conds, params = self._filters(simulation_id, status, message_type, before)
        params.update(limit=limit, offset=offset)
        rows = yield Query(
            "SELECT d.id, length(d.url) + coalesce(length(d.last_error), 0) "
            "+ coalesce(length(d.success_response_body), 0) + coalesce((SELECT "
            "sum(coalesce(length(a.response_body), 0) + coalesce(length(a.error), 0) + 200) "
            "FROM webhook_attempts AS a WHERE a.delivery_id = d.id), 0) "
            f"FROM {self._log_rows(status)} WHERE {' AND '.join(conds)} "
            "ORDER BY d.id DESC LIMIT :limit OFFSET :offset", params)
        return [(int(i), int(size)) for i, size in rows]

    def count(self, simulation_id: int, *, status: str | None, message_type: str | None,
              limit: int) -> Steps[tuple[int, bool]]:
        """The simulation's deliveries matching the filters, and whether that is all of them.
        Pending, delivering, failed and disabled ones are counted exactly, read as ``page``
        reads them (only those rows). Succeeded ones, or every one, are counted among the
        simulation's newest ``limit`` + 1 deliveries, whatever the rest of its history
        holds: exact when it has no more; otherwise at least that many match (False)."""
        conds, params = self._filters(simulation_id, status, message_type, None)
        if status is not None and status != "succeeded":
            found = yield Query(f"SELECT count(*) FROM {self._log_rows(status)} "
                                f"WHERE {' AND '.join(conds)}", params)
            return int(found[0][0]), True
        params["window"] = limit + 1
        found = yield Query(
            f"SELECT count(*), coalesce(sum(CASE WHEN {' AND '.join(conds[1:]) or '1 = 1'} "
            "THEN 1 ELSE 0 END), 0) FROM (SELECT d.id, d.status, d.message_type "
            f"FROM {self._log_rows(status)} WHERE {conds[0]} ORDER BY d.id DESC "
            "LIMIT :window) AS d", params)
        read, matching = (int(v) for v in found[0])
        return min(matching, limit), read <= limit

    def _log_rows(self, status: str | None) -> str:
        """The FROM item (``d``) a delivery-log read of ``status`` reads, so that it never
        reads more than the rows it may return: for pending or delivering, a simulation's
        rows still to send (``active_rows``: its ordered lane, its unordered rows waiting,
        and the unordered rows in flight); for failed or disabled, ``ix_deliveries_ended``;
        otherwise the simulation's rows by id."""
        if status in ACTIVE_STATES:
            # The lane (both states) and the unordered rows waiting, or in flight.
            parts = (0, 1) if status == "pending" else (0, 2)
            return f"({self.active_rows(parts, of_simulation=True)}) AS d"
        if status in ("failed", "disabled"):
            return f"webhook_deliveries AS d{self.hint('ix_deliveries_ended')}"
        return "webhook_deliveries AS d"

    @staticmethod
    def _filters(simulation_id: int, status: str | None, message_type: str | None,
                 before: int | None) -> tuple[list[str], dict[str, Any]]:
        conds = ["d.simulation_id = :sim"]
        params: dict[str, Any] = {"sim": simulation_id}
        if status is not None:
            conds.append("d.status = :status")
            params["status"] = status
            if status in ("failed", "disabled"):
                # The literal predicate lets the planner read ix_deliveries_ended.
                conds.append(f"d.{ENDED_WHERE}")
        if message_type is not None:
            conds.append("d.message_type = :type")
            params["type"] = message_type
        if before is not None:
            conds.append("d.id < :before")
            params["before"] = before
        return conds, params

    def one(self, simulation_id: int, delivery_id: int) -> Steps[dict[str, Any] | None]:
        found = yield Query(f"SELECT {_ROW_COLUMNS} FROM webhook_deliveries "
                            "WHERE id = :id AND simulation_id = :sim",
                            {"id": delivery_id, "sim": simulation_id})
        return dict(zip(ROW_FIELDS, found[0], strict=True)) if found else None

    def attempts_of(self, delivery_ids: Sequence[int]) -> Steps[list[dict[str, Any]]]:
        """The attempt rows of ``delivery_ids``, oldest first."""
        out: list[dict[str, Any]] = []
        for start in range(0, len(delivery_ids), ID_READ_CHUNK):
            part = delivery_ids[start:start + ID_READ_CHUNK]
            marks = ", ".join(f":d{n}" for n in range(len(part)))
            rows = yield Query(f"SELECT {_ATTEMPT_COLUMNS} FROM webhook_attempts "
                               f"WHERE delivery_id IN ({marks}) ORDER BY id",
                               {f"d{n}": i for n, i in enumerate(part)})
            out += [dict(zip(ATTEMPT_FIELDS, row, strict=True)) for row in rows]
        return out

    def backlog(self, simulation_id: int | None) -> Steps[list[tuple[int, int, float]]]:
        """Per simulation (one, or every one): deliveries still to send, and the creation
        time of the oldest of them."""
        # Two columns, not the rows: the gauges read every delivery still to send.
        active = self.active_rows((0, 1, 2), of_simulation=simulation_id is not None,
                                  columns="simulation_id, created_at")
        rows = yield Query(
            f"SELECT simulation_id, count(*), min(created_at) FROM ({active}) AS a "
            "GROUP BY simulation_id ORDER BY simulation_id",
            {} if simulation_id is None else {"sim": simulation_id})
        return [(int(sim), int(count), float(oldest)) for sim, count, oldest in rows]

    def purge(self, cutoff: float) -> Steps[int]:
        """Remove finished deliveries last changed before ``cutoff``, with their attempts.

        Only rows created before ``cutoff`` can qualify (a row changes after it is
        created), and ids rise with creation: the candidates are the ids below the first
        row created since, read by id from the oldest, not by a scan of the whole outbox.
        """
        bound = yield Query("SELECT id FROM webhook_deliveries WHERE created_at >= :cutoff "
                            "ORDER BY id LIMIT 1", {"cutoff": cutoff})
        old = ("SELECT id FROM webhook_deliveries WHERE status IN "
               "('succeeded', 'failed', 'disabled') AND updated_at < :cutoff")
        params: dict[str, Any] = {"cutoff": cutoff}
        if bound:
            old += " AND id < :bound"
            params["bound"] = bound[0][0]
        yield Query(f"DELETE FROM webhook_attempts WHERE delivery_id IN ({old})", params)
        return (yield from self._delete_counted(
            f"DELETE FROM webhook_deliveries WHERE id IN ({old})", params))

    def _delete_counted(self, sql: str, params: dict[str, Any]) -> Steps[int]:
        """Run a DELETE; the count of rows it removed."""
        yield Query(sql, params)
        return int((yield Query("SELECT changes()"))[0][0])


class PostgresOutboxSql(OutboxSql):
    """What differs on PostgreSQL: arrays for many rows, row locks, per-URL try-locks."""

    dialect = "postgresql"
    true, false = "true", "false"
    fence = " OFFSET 0"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # The namespace of the per-URL transaction locks (``lock_urls``): "rcwh".
    URL_LOCK_SPACE = 0x72637768

    def __init__(self, *, hold_s: float = 2.0) -> None:
        super().__init__()
        self._hold_sql = hold_sql(hold_s)
        self.in_flight_sql = _IN_FLIGHT_LATERAL_SQL

    def hint(self, index: str) -> str:
        return ""

    def insert_from_arrays(self, first_id: str) -> str:
        """The INSERT of the delivery rows of one group commit, as one statement over
        arrays (``insert_arrays``' parameters), for a CTE of the event log's statement:
        ``first_id`` is the SQL of the id before the group's first event (a row's event id
        is it plus the event's position in the group, from 1)."""
        return ("INSERT INTO webhook_deliveries (event_id, simulation_id, message_type, url, "
                "status, attempt_count, next_attempt_at, created_at, updated_at, ordered) "
                f"SELECT {first_id} + w.pos, w.sim, w.type, w.url, 'pending', 0, "
                "CAST(:now AS double precision), CAST(:now AS double precision), "
                "CAST(:now AS double precision), w.ordered "
                "FROM unnest(CAST(:w_pos AS bigint[]), CAST(:w_sims AS integer[]), "
                "CAST(:w_types AS varchar[]), CAST(:w_urls AS text[]), "
                "CAST(:w_ordered AS boolean[])) AS w(pos, sim, type, url, ordered)")

    @staticmethod
    def insert_arrays(rows: Sequence[tuple[int, int, str, str, bool]]) -> dict[str, list[Any]]:
        """The array parameters of ``insert_from_arrays`` for delivery rows (position of
        the event in the group from 1, simulation id, message type, URL, ordered)."""
        columns = list(zip(*rows, strict=True)) if rows else [(), (), (), (), ()]
        return {"w_pos": list(columns[0]), "w_sims": list(columns[1]),
                "w_types": list(columns[2]), "w_urls": list(columns[3]),
                "w_ordered": list(columns[4])}

    def _delete_counted(self, sql: str, params: dict[str, Any]) -> Steps[int]:
        found = yield Query(f"WITH gone AS ({sql} RETURNING 1) SELECT count(*) FROM gone",
                            params)
        return int(found[0][0])

    def begin_claim(self, writes_first: bool) -> Steps[None]:
        yield from self.hold()

    def hold(self) -> Steps[None]:
        # A worker stopped inside this transaction (SIGSTOP, a paused VM) would keep its row
        # and URL locks, and every other worker's claim would skip those rows for as long:
        # the server ends the transaction once it has waited this long for the worker, so a
        # stalled worker holds only its leases.
        yield Query(self._hold_sql)
        # A worker's own bookkeeping (leases, results, releases) does not wait for the WAL's
        # flush to disk. What a crash of the database server's machine can lose is the
        # last few of these commits, so deliveries leased or answered just before it are
        # sent again: at least once, as after any failure. No event is at stake: the group
        # commit that stores events and their delivery rows keeps the server's setting.
        yield Query(ASYNC_COMMIT_SQL)

    ends_stalled = True

    def end_stalled(self, hold_s: float) -> Steps[int]:
        # ``hold``'s timeout covers a worker stopped between two statements. A worker stopped
        # while it was writing one (a ``Many``'s pipeline of Bind and Execute messages, or
        # one large message, half sent) leaves its session "active", waiting for the rest,
        # where no server timeout applies, and the rows it locked stay locked: the other
        # workers' claims skip them (SKIP LOCKED), so lanes whose heads they are stop until
        # it resumes (tests/webhooks/test_stalls.py met it). Any worker ends such a session
        # of the same database and role once it has waited ``hold_s`` for its client with a
        # transaction id (it has written). Its transaction rolls back, as ``hold``'s would.
        found = yield Query(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND usename = current_user "
            "AND pid <> pg_backend_pid() AND state = 'active' AND wait_event = 'ClientRead' "
            "AND backend_xid IS NOT NULL "
            "AND state_change < clock_timestamp() - make_interval(secs => :hold)",
            {"hold": float(hold_s)})
        return int(found[0][0])

    def lock_urls(self, urls: Sequence[str]) -> Steps[set[str]]:
        # Try-locks, one per URL, held to the end of the transaction: the slots of a URL
        # are planned by one claim at a time (so the per-endpoint limit holds over every
        # worker), and a claim never waits for another: a URL being planned elsewhere is
        # left to the next claim.
        if not urls:
            return set()
        found = yield Query(
            "SELECT u FROM unnest(CAST(:urls AS text[])) AS u "
            "WHERE pg_try_advisory_xact_lock(:space, hashtext(u))",
            {"urls": list(urls), "space": self.URL_LOCK_SPACE})
        return {row[0] for row in found}

    def heads(self, now: float, lane_rows: int, chunk_rows: Mapping[str, int],
              default_chunk_rows: int, busy_lanes: Set[int], *, stale: bool,
              ) -> Steps[list[tuple[Any, ...]]]:
        # One statement, one round trip: the skip scans of the lanes and the URLs as CTEs,
        # each head a LATERAL read of its partial index (a URL's LIMIT from the arrays).
        urls = sorted(chunk_rows)
        sql = (
            f"WITH RECURSIVE {self.keys_cte('lanes', 'simulation_id', self.lane_where, '')}, "
            f"{self.keys_cte('urls', 'url', self.loose_where, '')} "
            f"SELECT h.* FROM lanes CROSS JOIN LATERAL (SELECT {_CANDIDATE_COLUMNS} "
            f"FROM webhook_deliveries WHERE {self.lane_where} AND simulation_id = lanes.v "
            "ORDER BY event_id LIMIT CAST(:lane_rows AS integer)) AS h "
            "WHERE lanes.v IS NOT NULL AND lanes.v <> ALL(CAST(:busy AS integer[])) "
            "UNION ALL SELECT h.* FROM (SELECT urls.v, "
            "coalesce(x.n, CAST(:default_rows AS integer)) AS n FROM urls "
            "LEFT JOIN unnest(CAST(:urls AS text[]), CAST(:rows AS integer[])) AS x(url, n) "
            "ON x.url = urls.v WHERE urls.v IS NOT NULL) AS u CROSS JOIN LATERAL "
            f"(SELECT {_CANDIDATE_COLUMNS} FROM webhook_deliveries WHERE {self.loose_where} "
            f"AND url = u.v AND next_attempt_at <= :now ORDER BY {DUE_ORDER} LIMIT u.n) AS h "
            "WHERE u.n > 0")
        if stale:
            sql += f" UNION ALL SELECT * FROM ({self.stale_rows(default_chunk_rows)}) AS s"
        found: list[tuple[Any, ...]] = yield Query(sql, {
            "now": now, "lane_rows": lane_rows, "busy": sorted(busy_lanes),
            "default_rows": default_chunk_rows, "urls": urls,
            "rows": [chunk_rows[url] for url in urls]})
        return found

    def in_flight_after_lock(self, now: float) -> Steps[list[tuple[Any, ...]] | None]:
        # A claim that held these URLs before this one may have committed leases since the
        # first count (READ COMMITTED: a new statement sees them).
        rows: list[tuple[Any, ...]] = yield self.in_flight_query(now)
        return rows

    def take(self, now: float, lease_until: float,
             units: Sequence[tuple[str, Sequence[int]]]) -> Steps[set[int]]:
        # One statement: rows another transaction holds are skipped, not waited for (so the
        # lease, dated before it, is never dated before a wait); the status is checked again
        # on the row's newest version (another claim may have leased it since this claim
        # read it).
        ids = [i for _token, unit_ids in units for i in unit_ids]
        if not ids:
            return set()
        # Each row locked by a LATERAL read of the primary key: an ``id = ANY(...)`` of a
        # few hundred ids was planned as a scan of the whole table where it had no
        # statistics (tests/webhooks/test_plans.py).
        found = yield Query(
            "UPDATE webhook_deliveries AS d SET status = 'delivering', "
            "lease_until = :lease, claim_token = u.token, updated_at = :now "
            "FROM unnest(CAST(:ids AS bigint[]), CAST(:tokens AS varchar[])) AS u(id, token) "
            "CROSS JOIN LATERAL (SELECT id FROM webhook_deliveries AS f WHERE f.id = u.id "
            "AND (status = 'pending' OR (status = 'delivering' AND lease_until < :now)) "
            "FOR UPDATE SKIP LOCKED) AS free WHERE d.id = free.id RETURNING d.id",
            {"lease": lease_until, "now": now, "ids": ids,
             "tokens": [t for t, unit_ids in units for _i in unit_ids]})
        return {row[0] for row in found}

    def lease(self, now: float, lease_until: float,
              units: Sequence[tuple[str, Sequence[int]]]) -> Steps[None]:
        # ``take``'s statement: each row by its primary key. As a join of the table on the
        # array (``WHERE d.id = u.id``), PostgreSQL planned a hash join over a scan of
        # every delivery when the table had no statistics and up to about 30,000 rows, or
        # the array about a thousand ids: each extension of an unordered chunk read the
        # whole table. The rows are this transaction's already (``free_url_rows`` locked
        # them), so ``SKIP LOCKED`` skips none of them.
        yield from self.take(now, lease_until, units)

    def bodies(self, event_ids: Sequence[int]) -> Steps[dict[int, bytes]]:
        # One text whatever the count (an IN list of n binds is a new statement for each n,
        # prepared inside the claim's transaction: ``store.pgsteps``), each event read by its
        # primary key: the LIMIT keeps the LATERAL read apart (without it, the read was
        # planned as a hash join over a scan of every event, tests/webhooks/test_plans.py).
        read: dict[int, bytes] = {}
        for start in range(0, len(event_ids), BODY_READ_CHUNK):
            for event_id, body in (yield Query(
                "SELECT e.id, e.body FROM unnest(CAST(:ids AS bigint[])) AS u(id) "
                "CROSS JOIN LATERAL (SELECT id, body FROM events WHERE events.id = u.id "
                "LIMIT 1) AS e",
                {"ids": list(event_ids[start:start + BODY_READ_CHUNK])},
            )):
                read[event_id] = bytes(body)
        return read

    def renew(self, token: str, now: float, lease_until: float) -> Steps[set[int]]:
        # Rows locked by another transaction are skipped, never waited for: the worker's
        # own claim recording their results (a renewal waiting for it while it waits for a
        # row the renewal locked was a deadlock, and the lease ran out meanwhile), or a claim
        # that found their lease run out (they are that claim's now). ``FOR NO KEY UPDATE``:
        # the worker's own record holds its lane leases ``FOR KEY SHARE`` (``lanes_held``),
        # which this lock does not conflict with, where a claim's ``FOR UPDATE`` does.
        found = yield Query(
            "WITH held AS (SELECT id FROM webhook_deliveries WHERE claim_token = :token "
            "AND status = 'delivering' AND (lease_until >= :now OR NOT ordered) "
            "ORDER BY id FOR NO KEY UPDATE SKIP LOCKED) "
            "UPDATE webhook_deliveries AS d SET lease_until = :lease, updated_at = :now "
            "FROM held WHERE d.id = held.id RETURNING d.id",
            {"lease": lease_until, "now": now, "token": token})
        return {row[0] for row in found}

    def lanes_held(self, tokens: Sequence[str], now: float) -> Steps[set[str]]:
        # Locked ``FOR KEY SHARE`` to the end of the transaction: a claim taking a lane whose
        # lease ran out locks its rows ``FOR UPDATE SKIP LOCKED``, so it leaves this lane
        # alone until this transaction has written the unit's results (no claim waits); the
        # worker's own renewal (``FOR NO KEY UPDATE``) does not conflict with it.
        # Read by token from ix_deliveries_leased: ``ordered`` is tested through a cast,
        # which the planner cannot match to ix_deliveries_lanes' predicate (it chose to read
        # that index whole otherwise).
        if not tokens:
            return set()
        found = yield Query(
            "SELECT DISTINCT t FROM (SELECT claim_token AS t FROM webhook_deliveries "
            "WHERE status = 'delivering' AND claim_token = ANY(CAST(:tokens AS varchar[])) "
            "AND lease_until >= :now AND CAST(ordered AS integer) = 1 FOR KEY SHARE) AS h",
            {"tokens": sorted(tokens), "now": now})
        return {row[0] for row in found}

    def successes(self, rows: Sequence[tuple[Any, ...]]) -> Steps[None]:
        columns = list(zip(*rows, strict=True))
        # One statement, one round trip. Each row is read once, by its primary key (a
        # LATERAL read per id, kept apart by its LIMIT, its token and status checked
        # outside it so that no other index serves it: joined as a set, the planner read
        # every in-flight row's entry, live or dead, through ix_deliveries_leased on each
        # call, and by token, a unit's entries once per row); an earlier success on a row
        # (a replay) is kept as an attempt. Rows leased to their token (``h``) and pending
        # rows of an ordered unit whose lane lease ``lanes_held`` found held (``hp``, their
        # token among ``lanes``) are written by two UPDATEs, each finding its rows by id and
        # checking that the status (and token) are still the ones read: values, not
        # constants, so no partial index is read whole for them. (One UPDATE with an OR of
        # the two cases was planned as a hash join over a scan of the table.)
        set_columns = (
            "status = 'succeeded', attempt_count = d.attempt_count + 1, "
            "next_attempt_at = :now, last_error = NULL, lease_until = NULL, "
            "claim_token = NULL, updated_at = :now, success_started_at = {h}.started, "
            "success_latency_ms = {h}.latency, success_status_code = {h}.code, "
            "success_response_body = {h}.body")
        yield Query(
            "WITH r AS MATERIALIZED (SELECT u.*, f.status AS held, f.claim_token AS held_by, "
            "f.ordered AS in_lane, f.success_started_at AS was_started, "
            "f.success_latency_ms AS was_latency, f.success_status_code AS was_code, "
            "f.success_response_body AS was_body FROM unnest(CAST(:ids AS bigint[]), "
            "CAST(:tokens AS varchar[]), CAST(:started AS double precision[]), "
            "CAST(:latency AS double precision[]), CAST(:code AS integer[]), "
            "CAST(:body AS text[])) AS u(id, token, started, latency, code, body) "
            "CROSS JOIN LATERAL (SELECT status, claim_token, ordered, success_started_at, "
            "success_latency_ms, success_status_code, success_response_body "
            "FROM webhook_deliveries AS f WHERE f.id = u.id LIMIT 1) AS f), "
            "h AS MATERIALIZED (SELECT * FROM r WHERE held_by = token "
            "AND held = 'delivering'), "
            "hp AS MATERIALIZED (SELECT * FROM r WHERE held = 'pending' AND in_lane "
            "AND token = ANY(CAST(:lanes AS varchar[]))), "
            "kept AS (INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, "
            "status_code, error_class, error, response_body) SELECT id, was_started, "
            "was_latency, was_code, NULL, NULL, was_body FROM (SELECT * FROM h UNION ALL "
            "SELECT * FROM hp) AS k WHERE was_started IS NOT NULL ORDER BY id), "
            f"pend AS (UPDATE webhook_deliveries AS d SET {set_columns.format(h='hp')} "
            "FROM hp WHERE d.id = hp.id AND d.status = hp.held AND d.claim_token IS NULL) "
            f"UPDATE webhook_deliveries AS d SET {set_columns.format(h='h')} "
            "FROM h WHERE d.id = h.id AND d.claim_token = h.token AND d.status = h.held",
            {"now": rows[0][1], "ids": list(columns[6]), "tokens": list(columns[7]),
             "lanes": sorted({token for token, lane in zip(columns[7], columns[8],
                                                            strict=True) if lane}),
             "started": list(columns[2]), "latency": list(columns[3]),
             "code": list(columns[4]), "body": list(columns[5])})


ASYNC_COMMIT_SQL = "SET LOCAL synchronous_commit = off"
"""PostgreSQL: the transaction's commit returns before its WAL is flushed (``hold``)."""


def hold_sql(hold_s: float) -> str:
    """PostgreSQL's statement that ends the current transaction if its client stops inside
    it for ``hold_s`` (``PostgresOutboxSql.hold``; the failing clocks' transactions too)."""
    return f"SET LOCAL idle_in_transaction_session_timeout = {max(1, int(hold_s * 1000))}"


def outbox_sql(dialect: str, *, hold_s: float = 2.0) -> OutboxSql:
    """The statements of ``dialect`` (``sqlite`` or ``postgresql``). ``hold_s``: on
    PostgreSQL, how long the server waits for a stalled claimer before it ends the claim's
    transaction (``begin_claim``)."""
    if dialect == "postgresql":
        return PostgresOutboxSql(hold_s=hold_s)
    if dialect == "sqlite":
        return OutboxSql()
    raise ValueError(f"no outbox statements for the {dialect!r} dialect")


__all__ = [
    "ACTIVE_STATES",
    "ASYNC_COMMIT_SQL",
    "ENDED_WHERE",
    "INSERT_COLUMNS",
    "LANE_ROWS_WHERE",
    "LEASED_WHERE",
    "LOOSE_LEASED_WHERE",
    "LOOSE_PENDING_WHERE",
    "NEWEST_ID_SQL",
    "STATES",
    "SUCCESS_SQL",
    "SUCCESS_VALUES_SQL",
    "TERMINAL_STATES",
    "OutboxSql",
    "PostgresOutboxSql",
    "hold_sql",
    "outbox_sql",
]
