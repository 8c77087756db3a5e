"""The webhook outbox's one owner: every statement on ``webhook_deliveries`` and
``webhook_attempts``, per dialect in one object (``OutboxSql``, ``PostgresOutboxSql``),
chosen once by ``outbox_sql(dialect)``, never an ``if`` in a caller.

The statements are grouped by job, one module each: what they share (``outbox_base``: the
indexes' predicates, states, columns, claim guards), the claim (``outbox_claim``), the record
of results (``outbox_record``), the delivery log and retention (``outbox_log``), and
PostgreSQL's session management (``pgsession``). Nothing outside these modules writes SQL on
these tables (``tests/test_layering.py`` checks it).

Which claim each statement must hold is the table in docs/webhooks.md ("Who may write a
delivery"): every statement that records, releases, renews or repoints a leased row names
the claim token it holds (``WHERE claim_token = :t AND status = 'delivering'``), so the
write of a worker whose lease ran out changes nothing. The rows of an ordered unit but its
last stay pending while they are sent (the last row is the lane's lease): a result of one
of them is written only if the row is still pending and ``lanes_held`` found the token's
lane lease held and unexpired, before the transaction's first write.
"""

from __future__ import annotations

from .outbox_base import (
    ACTIVE_STATES,
    ENDED_WHERE,
    INSERT_COLUMNS,
    LANE_ROWS_WHERE,
    LEASED_WHERE,
    LOOSE_LEASED_WHERE,
    LOOSE_PENDING_WHERE,
    NEWEST_ID_SQL,
    STATES,
    TERMINAL_STATES,
)
from .outbox_claim import ClaimSql, PostgresClaimSql
from .outbox_log import LogSql, PostgresLogSql
from .outbox_record import SUCCESS_SQL, SUCCESS_VALUES_SQL, PostgresRecordSql, RecordSql
from .pgsession import ASYNC_COMMIT_SQL, PostgresSession, hold_sql


class OutboxSql(ClaimSql, RecordSql, LogSql):
    """The outbox's statements on SQLite; ``PostgresOutboxSql`` overrides what differs."""


class PostgresOutboxSql(PostgresSession, PostgresClaimSql, PostgresRecordSql, PostgresLogSql,
                        OutboxSql):
    """What differs on PostgreSQL: arrays for many rows, row locks, per-URL try-locks, and
    the session's hold."""


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
