"""The statements that record what a worker's claim sent: successes, other results,
attempts, releases, and the writes on rows no claim holds (repoint, disable)
(``RecordSql``; PostgreSQL's differences in ``PostgresRecordSql``).

Every statement that records or releases a leased row names the claim token it holds
(``HELD``), so the write of a worker whose lease ran out changes nothing; the pending rows
of an ordered unit are written only under the lane lease ``lanes_held`` found.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from .outbox_base import HELD, HELD_OR_LANE, OutboxBase, PostgresOutboxBase
from .txsteps import Many, Query, Steps

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
# An ordered lane that another worker holds under its lane lease (its unit's last row,
# leased and unexpired): the pending rows ahead of that row are its unit's, being sent.
_LANE_HELD_ELSEWHERE = (
    "EXISTS (SELECT 1 FROM webhook_deliveries AS h WHERE h.simulation_id = :sim "
    "AND h.status = 'delivering' AND h.ordered = {true} AND h.lease_until >= :now "
    "AND coalesce(h.claim_token, '') <> :token)")
# A URL change: the simulation's waiting rows, and the rows the caller's claim holds, go to
# the URL in force; rows another worker holds, by row or by lane, are left to it.
_REPOINT_SQL = ("UPDATE webhook_deliveries SET url = :url, updated_at = :now "
                "WHERE simulation_id = :sim AND url <> :url AND ((status = 'pending' AND "
                f"(ordered = {{false}} OR NOT {_LANE_HELD_ELSEWHERE})) OR "
                "(status = 'delivering' AND claim_token = :token))")
# The simulation's waiting rows, but those of a lane another worker holds (``_REPOINT_SQL``);
# that worker finds the endpoint disabled when it sends them.
_DISABLE_SQL = ("UPDATE webhook_deliveries SET status = 'disabled', last_error = :reason, "
                "updated_at = :now WHERE simulation_id = :sim AND status = 'pending' "
                f"AND (ordered = {{false}} OR NOT {_LANE_HELD_ELSEWHERE}) RETURNING id")
_SUCCESS_HELD_SQL = ("SELECT id, success_started_at, claim_token, status, ordered "
                     "FROM webhook_deliveries WHERE id IN (SELECT value FROM json_each(:ids))")


def _holds(row: tuple[Any, ...], state: tuple[Any, ...]) -> bool:
    """Whether ``SUCCESS_SQL``'s guard holds for its parameter ``row`` on a delivery whose
    (success_started_at, claim_token, status, ordered) are ``state``."""
    _started, token, status, ordered = state
    return ((status == "delivering" and token == row[7])
            or (status == "pending" and bool(ordered) and bool(row[8])))
_KEEP_ONE_SUCCESS_SQL = (
    "INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, status_code, "
    "error_class, error, response_body) SELECT id, success_started_at, success_latency_ms, "
    "success_status_code, NULL, NULL, success_response_body FROM webhook_deliveries "
    f"WHERE id = ? AND {HELD_OR_LANE} AND success_started_at IS NOT NULL")


class RecordSql(OutboxBase):
    """The record's statements on SQLite."""

    @property
    def result_sql(self) -> str:
        return _RESULT_SQL.format(true=self.true)

    @property
    def repoint_sql(self) -> str:
        return _REPOINT_SQL.format(true=self.true, false=self.false)

    @property
    def disable_sql(self) -> str:
        return _DISABLE_SQL.format(true=self.true, false=self.false)

    def successes(self, rows: Sequence[tuple[Any, ...]]) -> Steps[set[int]]:
        """Write successes (``SUCCESS_SQL``'s parameter rows), each only where its token
        still holds the row, or holds the lane of a pending row (the row's ``lane`` flag);
        an earlier success on a row (a replay, or a send repeated after a lease ran out) is
        kept as an attempt first. The ids of the rows written."""
        ids = [row[6] for row in rows]
        if SUCCESS_VALUES_SQL is None or len(set(ids)) < len(ids):
            # Old SQLite, or a delivery twice in one batch (never, from one dispatcher). The
            # transaction holds the write lock: the guard reads now as the writes will.
            found = {r[0]: r[1:] for r in (yield Query(_SUCCESS_HELD_SQL,
                                                       {"ids": json.dumps(ids)}))}
            yield Many(_KEEP_ONE_SUCCESS_SQL, [row[6:9] for row in rows])
            yield Many(SUCCESS_SQL, rows)
            return {row[6] for row in rows if row[6] in found and _holds(row, found[row[6]])}
        # Rows holding no success, the common case: no statement to look for one.
        before = (yield Query("SELECT total_changes()"))[0][0]
        yield Many(SUCCESS_SQL + " AND success_started_at IS NULL", rows,
                   SUCCESS_VALUES_SQL + " AND webhook_deliveries.success_started_at IS NULL")
        if (yield Query("SELECT total_changes()"))[0][0] - before == len(rows):
            return set(ids)
        # A row left as it was holds an earlier success, or is no longer this claim's (the
        # guarded statements below then change nothing on it).
        held = {r[0]: r[1:] for r in (yield Query(_SUCCESS_HELD_SQL,
                                                  {"ids": json.dumps(ids)}))}
        written = {row[6] for row in rows if (state := held.get(row[6])) is not None
                   and state[2] == "succeeded" and state[1] is None and state[0] == row[2]}
        again = [row for row in rows
                 if (state := held.get(row[6])) is not None and state[0] is not None
                 and state[0] != row[2]]
        if again:
            written |= {row[6] for row in again if _holds(row, held[row[6]])}
            yield Many(_KEEP_ONE_SUCCESS_SQL, [row[6:9] for row in again])
            yield Many(SUCCESS_SQL, again, SUCCESS_VALUES_SQL)
        return written

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

    def repoint(self, simulation_id: int, url: str, token: str, now: float) -> Steps[None]:
        """Point the simulation's waiting rows, and those ``token`` holds, at ``url``."""
        yield Query(self.repoint_sql, {"url": url, "now": now, "sim": simulation_id,
                                       "token": token})

    def disable_pending(self, simulation_id: int, reason: str, now: float,
                        token: str = "") -> Steps[int]:
        """Mark the simulation's waiting deliveries ``disabled``, but those of an ordered
        lane that a claim other than ``token`` holds."""
        return len((yield Query(self.disable_sql, {"sim": simulation_id, "reason": reason,
                                                   "now": now, "token": token})))


class PostgresRecordSql(RecordSql, PostgresOutboxBase):
    """The record on PostgreSQL: one statement over arrays, lane leases locked to the end of
    the transaction."""

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

    def successes(self, rows: Sequence[tuple[Any, ...]]) -> Steps[set[int]]:
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
        written = yield Query(
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
            "FROM hp WHERE d.id = hp.id AND d.status = hp.held AND d.claim_token IS NULL "
            "RETURNING d.id), "
            f"own AS (UPDATE webhook_deliveries AS d SET {set_columns.format(h='h')} "
            "FROM h WHERE d.id = h.id AND d.claim_token = h.token AND d.status = h.held "
            "RETURNING d.id) SELECT id FROM pend UNION ALL SELECT id FROM own",
            {"now": rows[0][1], "ids": list(columns[6]), "tokens": list(columns[7]),
             "lanes": sorted({token for token, lane in zip(columns[7], columns[8],
                                                            strict=True) if lane}),
             "started": list(columns[2]), "latency": list(columns[3]),
             "code": list(columns[4]), "body": list(columns[5])})
        return {row[0] for row in written}
