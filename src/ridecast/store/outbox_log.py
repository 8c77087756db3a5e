"""The delivery log's statements and retention on the webhook outbox: pages, counts, one
delivery and its attempts, the backlog, replays, the purge of finished deliveries, and the
reads of the rows still to send (``LogSql``; PostgreSQL's differences in ``PostgresLogSql``).
None of them needs a claim: a replay queues a delivery that is not in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .outbox_base import (
    ACTIVE_STATES,
    ATTEMPT_COLUMNS,
    ATTEMPT_FIELDS,
    ENDED_WHERE,
    ROW_COLUMNS,
    ROW_FIELDS,
    OutboxBase,
    PostgresOutboxBase,
)
from .txsteps import Query, Steps

ID_READ_CHUNK = 500  # delivery ids per read of attempts
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


class LogSql(OutboxBase):
    """The delivery log's and retention's statements on SQLite."""

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

    def page(self, simulation_id: int, *, status: str | None, message_type: str | None,
             before: int | None, limit: int, offset: int = 0,
             ) -> Steps[list[dict[str, Any]]]:
        """Deliveries of a simulation, newest first, below id ``before`` when given."""
        conds, params = self._filters(simulation_id, status, message_type, before)
        params.update(limit=limit, offset=offset)
        rows = yield Query(f"SELECT {ROW_COLUMNS} FROM {self._log_rows(status)} "
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
        found = yield Query(f"SELECT {ROW_COLUMNS} FROM webhook_deliveries "
                            "WHERE id = :id AND simulation_id = :sim",
                            {"id": delivery_id, "sim": simulation_id})
        return dict(zip(ROW_FIELDS, found[0], strict=True)) if found else None

    def attempts_of(self, delivery_ids: Sequence[int]) -> Steps[list[dict[str, Any]]]:
        """The attempt rows of ``delivery_ids``, oldest first."""
        out: list[dict[str, Any]] = []
        for start in range(0, len(delivery_ids), ID_READ_CHUNK):
            part = delivery_ids[start:start + ID_READ_CHUNK]
            marks = ", ".join(f":d{n}" for n in range(len(part)))
            rows = yield Query(f"SELECT {ATTEMPT_COLUMNS} FROM webhook_attempts "
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


class PostgresLogSql(LogSql, PostgresOutboxBase):
    """The delivery log on PostgreSQL: a DELETE counts its rows by RETURNING."""

    def _delete_counted(self, sql: str, params: dict[str, Any]) -> Steps[int]:
        found = yield Query(f"WITH gone AS ({sql} RETURNING 1) SELECT count(*) FROM gone",
                            params)
        return int(found[0][0])
