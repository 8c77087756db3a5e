"""The claim's statements on the webhook outbox: which units are in flight, the heads of the
lanes and URLs, the leases taken and renewed, the bodies read (``ClaimSql``; PostgreSQL's
differences in ``PostgresClaimSql``). The claimer (``webhooks/claimer.py``) runs them in one
transaction; docs/webhooks.md says what each lease guards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence, Set
from typing import Any

from .outbox_base import OutboxBase, PostgresOutboxBase
from .txsteps import Many, Query, Steps

BODY_READ_CHUNK = 500  # event ids per read of bodies (well under SQLite's variable limit)
# An ordered unit's lease (its last row) is renewed only while it has not run out: once it
# has, another worker may hold the lane with a unit that leaves this row out (a replayed
# delivery put ahead of it), and a renewal would put two units of one lane in flight.
# An unordered row whose lease ran out is renewed while no other claim took it.
_RENEW_SQL = ("UPDATE webhook_deliveries SET lease_until = :lease, updated_at = :now "
              "WHERE claim_token = :token AND status = 'delivering' "
              "AND (lease_until >= :now OR ordered = {false}) RETURNING id")
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
# whatever the planner's statistics): as ``_IN_FLIGHT_SQL``'s join on a subquery, a table
# without statistics (autovacuum off, or not yet run) is planned as a hash join over a
# sequential scan of every delivery. The tokens are walked from the
# highest down, and a unit's entries from its latest lease: the entries of a unit's rows
# already answered (dead versions until vacuum removes them) hold its earliest leases, and
# an ascending walk would meet them before a live one. The walk still reads the dead
# entries of units that have ended.
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
# down for hours leaves every delivery of those hours waiting).
DUE_ORDER = "next_attempt_at, event_id"
# The order a claim chooses its lanes and URLs in, by their head ``d`` (a lane's first active
# row, a URL's first due row): the one due the longest first, as ``claims.plan_units`` hands
# out units, so that a claim reading only a few keys reads those the plan would take first.
KEY_ORDER = "d.next_attempt_at, d.event_id, d.id"
# A head ``d`` that may be sent now (``claims.is_due``): a lane whose head waits for a retry
# gives no unit, and is not read.
_HEAD_DUE = ("((d.status = 'pending' AND d.next_attempt_at <= :now) "
             "OR (d.status = 'delivering' AND d.lease_until < :now))")


class ClaimSql(OutboxBase):
    """The claim's statements on SQLite (one writer: the transaction's write lock is the
    claim's only lock)."""

    @property
    def renew_sql(self) -> str:
        return _RENEW_SQL.format(false=self.false)

    @property
    def in_flight_sql(self) -> str:
        return _IN_FLIGHT_SQL.format(hint=self.hint("ix_deliveries_leased"))

    def begin_claim(self, writes_first: bool) -> Steps[None]:
        """Open a claim: SQLite takes its one write lock now (unless the transaction's first
        statement writes anyway), so nothing below reads a state another writer changes."""
        if not writes_first:
            yield Query("UPDATE webhook_deliveries SET claim_token = NULL WHERE id = -1")

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

    def keys_cte(self, name: str, column: str, where: str, index: str) -> str:
        """The distinct values of ``column`` among the rows of the partial ``index`` (whose
        predicate is ``where``), by a skip scan (one index seek per value), as a recursive
        CTE ``name(v)`` (its last row is NULL)."""
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
              default_chunk_rows: int, busy_lanes: Set[int], *, stale: bool, keys: int,
              skip_urls: Set[str] = frozenset(), closed_urls: Set[str] = frozenset(),
              ) -> Steps[list[tuple[Any, ...]]]:
        """The rows a claim plans with (``_CANDIDATE_COLUMNS``), read through the partial
        indexes rather than every active row, for at most ``keys`` lanes and URLs: those
        whose head (a lane's first active row, a URL's first due row) came due first
        (``KEY_ORDER``). Of each, the first ``lane_rows`` of an ordered lane, or the first
        unordered rows of a URL to have come due (``chunk_rows`` of it, or
        ``default_chunk_rows``; ``DUE_ORDER``); with ``stale`` the unordered rows whose lease
        ran out too. Left out: the lanes in ``busy_lanes``, lanes whose head is not due, the
        URLs in ``skip_urls`` (as URLs; their lanes stay), and every lane and URL of a URL in
        ``closed_urls`` or with no rows to read in ``chunk_rows``. The choice costs one index
        seek per lane and URL waiting (its head); rows are read only of those chosen. Here
        the keys are chosen by one statement, their rows read by the next ones."""
        closed = sorted({*closed_urls, *(url for url, n in chunk_rows.items() if n <= 0)})
        params: dict[str, Any] = {
            "now": now, "keys": int(keys), "skip_lanes": json.dumps(sorted(busy_lanes)),
            "skip_urls": json.dumps(sorted(skip_urls)), "closed": json.dumps(closed)}
        lanes_cte = self.keys_cte("lanes", "simulation_id", self.lane_where,
                                  "ix_deliveries_lanes")
        urls_cte = self.keys_cte("urls", "url", self.loose_where, "ix_deliveries_loose")
        chosen = yield Query(
            f"WITH RECURSIVE {lanes_cte}, {urls_cte} "
            "SELECT k.sim, k.url FROM (SELECT lanes.v AS sim, NULL AS url, (SELECT id FROM "
            f"webhook_deliveries{self.hint('ix_deliveries_lanes')} WHERE {self.lane_where} "
            "AND simulation_id = lanes.v ORDER BY event_id LIMIT 1) AS head FROM lanes "
            "WHERE lanes.v IS NOT NULL AND lanes.v NOT IN (SELECT value FROM "
            "json_each(:skip_lanes)) UNION ALL SELECT NULL, urls.v, (SELECT id FROM "
            f"webhook_deliveries{self.hint('ix_deliveries_loose')} WHERE {self.loose_where} "
            f"AND url = urls.v AND next_attempt_at <= :now ORDER BY {DUE_ORDER} LIMIT 1) "
            "FROM urls WHERE urls.v IS NOT NULL AND urls.v NOT IN (SELECT value FROM "
            "json_each(:skip_urls)) AND urls.v NOT IN (SELECT value FROM json_each(:closed))"
            ") AS k CROSS JOIN webhook_deliveries AS d WHERE d.id = k.head "
            f"AND {_HEAD_DUE} AND d.url NOT IN (SELECT value FROM json_each(:closed)) "
            f"ORDER BY {KEY_ORDER} LIMIT :keys", params)
        parts: list[str] = []
        reads: dict[str, Any] = {"now": now}
        for n, (sim, url) in enumerate(chosen):
            if sim is not None:
                reads[f"s{n}"] = sim
                parts.append(self.lane_head(n, lane_rows))
            else:
                reads[f"u{n}"] = url
                parts.append(self.url_head(n, chunk_rows.get(url, default_chunk_rows)))
        if stale:
            parts.append(self.stale_rows(default_chunk_rows))
        return (yield from self.candidates(parts, reads))

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

    def renew(self, token: str, now: float, lease_until: float) -> Steps[set[int]]:
        """Extend the lease of every row ``token`` still holds; their ids. On PostgreSQL, rows
        another transaction has locked are left as they are (``PostgresOutboxSql``)."""
        found = yield Query(self.renew_sql, {"lease": lease_until, "now": now,
                                             "token": token})
        return {row[0] for row in found}


class PostgresClaimSql(ClaimSql, PostgresOutboxBase):
    """The claim on PostgreSQL: row locks skipped, not waited for; per-URL try-locks."""

    # The namespace of the per-URL transaction locks (``lock_urls``): "rcwh".
    URL_LOCK_SPACE = 0x72637768

    @property
    def in_flight_sql(self) -> str:
        return _IN_FLIGHT_LATERAL_SQL

    def begin_claim(self, writes_first: bool) -> Steps[None]:
        yield from self.hold()

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
              default_chunk_rows: int, busy_lanes: Set[int], *, stale: bool, keys: int,
              skip_urls: Set[str] = frozenset(), closed_urls: Set[str] = frozenset(),
              ) -> Steps[list[tuple[Any, ...]]]:
        # One statement, one round trip: the skip scans of the lanes and the URLs as CTEs,
        # each key's head a LATERAL read of one entry of its partial index, the oldest
        # ``keys`` of them chosen, then each chosen key's rows a LATERAL read of the same
        # index (a URL's LIMIT from the arrays).
        urls = sorted(chunk_rows)
        closed = sorted({*closed_urls, *(url for url, n in chunk_rows.items() if n <= 0)})
        sql = (
            f"WITH RECURSIVE {self.keys_cte('lanes', 'simulation_id', self.lane_where, '')}, "
            f"{self.keys_cte('urls', 'url', self.loose_where, '')}, "
            "k AS (SELECT * FROM (SELECT lanes.v AS sim, CAST(NULL AS text) AS url, "
            "d.next_attempt_at, "
            "d.event_id, d.id FROM lanes CROSS JOIN LATERAL (SELECT id, url, status, "
            f"next_attempt_at, lease_until, event_id FROM webhook_deliveries WHERE "
            f"{self.lane_where} AND simulation_id = lanes.v ORDER BY event_id LIMIT 1) AS d "
            "WHERE lanes.v IS NOT NULL AND lanes.v <> ALL(CAST(:busy AS integer[])) "
            f"AND {_HEAD_DUE} AND d.url <> ALL(CAST(:closed AS text[])) "
            "UNION ALL SELECT NULL, urls.v, d.next_attempt_at, d.event_id, d.id FROM urls "
            "CROSS JOIN LATERAL (SELECT id, next_attempt_at, event_id FROM webhook_deliveries "
            f"WHERE {self.loose_where} AND url = urls.v AND next_attempt_at <= :now "
            f"ORDER BY {DUE_ORDER} LIMIT 1) AS d WHERE urls.v IS NOT NULL "
            "AND urls.v <> ALL(CAST(:skip_urls AS text[])) "
            "AND urls.v <> ALL(CAST(:closed AS text[]))) AS d "
            f"ORDER BY {KEY_ORDER} LIMIT CAST(:keys AS integer)) "
            f"SELECT h.* FROM k CROSS JOIN LATERAL (SELECT {_CANDIDATE_COLUMNS} "
            f"FROM webhook_deliveries WHERE {self.lane_where} AND simulation_id = k.sim "
            "ORDER BY event_id LIMIT CAST(:lane_rows AS integer)) AS h "
            "WHERE k.sim IS NOT NULL "
            "UNION ALL SELECT h.* FROM (SELECT k.url AS v, "
            "coalesce(x.n, CAST(:default_rows AS integer)) AS n FROM k "
            "LEFT JOIN unnest(CAST(:urls AS text[]), CAST(:rows AS integer[])) AS x(url, n) "
            "ON x.url = k.url WHERE k.url IS NOT NULL) AS u CROSS JOIN LATERAL "
            f"(SELECT {_CANDIDATE_COLUMNS} FROM webhook_deliveries WHERE {self.loose_where} "
            f"AND url = u.v AND next_attempt_at <= :now ORDER BY {DUE_ORDER} LIMIT u.n) AS h "
            "WHERE u.n > 0")
        if stale:
            sql += f" UNION ALL SELECT * FROM ({self.stale_rows(default_chunk_rows)}) AS s"
        found: list[tuple[Any, ...]] = yield Query(sql, {
            "now": now, "lane_rows": lane_rows, "busy": sorted(busy_lanes),
            "default_rows": default_chunk_rows, "urls": urls,
            "rows": [chunk_rows[url] for url in urls], "keys": int(keys),
            "skip_urls": sorted(skip_urls), "closed": closed})
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
        # ``take``'s statement: each row by its primary key. A join of the table on the
        # array (``WHERE d.id = u.id``) may be planned as a hash join over a scan of every
        # delivery (a table without statistics, or a long array), so that each extension
        # of an unordered chunk would read the whole table. The rows are this
        # transaction's already (``free_url_rows`` locked them), so ``SKIP LOCKED`` skips
        # none of them.
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
        # row the renewal locked would deadlock, the lease running out meanwhile), or a claim
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
