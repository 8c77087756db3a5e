"""PostgreSQL's session management for the outbox's transactions: the server ends a
transaction whose worker stopped inside it (``hold``), and any worker ends the session of a
worker stopped in the middle of a statement with rows locked (``end_stalled``).
"""

from __future__ import annotations

from .outbox_base import PostgresOutboxBase
from .txsteps import Query, Steps

ASYNC_COMMIT_SQL = "SET LOCAL synchronous_commit = off"
"""PostgreSQL: the transaction's commit returns before its WAL is flushed (``hold``)."""
def hold_sql(hold_s: float) -> str:
    """PostgreSQL's statement that ends the current transaction if its client stops inside
    it for ``hold_s`` (``PostgresOutboxSql.hold``; the failing clocks' transactions too)."""
    return f"SET LOCAL idle_in_transaction_session_timeout = {max(1, int(hold_s * 1000))}"


class PostgresSession(PostgresOutboxBase):
    """The session steps of the outbox's transactions on PostgreSQL."""

    def __init__(self, *, hold_s: float = 2.0) -> None:
        super().__init__()
        self._hold_sql = hold_sql(hold_s)

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
