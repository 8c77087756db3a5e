"""What every statement on the webhook outbox shares: the partial indexes' predicates, the
states, the columns, the claim guards, and the dialect's few literals (``OutboxBase``).

The statements themselves are grouped by job: the claim (``outbox_claim``), the record of
results (``outbox_record``), the delivery log and retention (``outbox_log``), PostgreSQL's
session management (``pgsession``); ``outbox`` assembles them into one object per dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from .dbclock import SQLITE_EPOCH
from .txsteps import Query, Steps

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
ROW_COLUMNS = ("id, event_id, simulation_id, message_type, url, status, attempt_count, "
                "next_attempt_at, lease_until, created_at, updated_at, last_error, "
                "ordered, claim_token, success_started_at, success_latency_ms, "
                "success_status_code, success_response_body")
ROW_FIELDS = tuple(name.strip() for name in ROW_COLUMNS.split(","))
ATTEMPT_COLUMNS = ("id, delivery_id, started_at, latency_ms, status_code, error_class, "
                    "error, response_body")
ATTEMPT_FIELDS = tuple(name.strip() for name in ATTEMPT_COLUMNS.split(","))


class OutboxBase:
    """The dialect's literals and the reads of the rows still to send, on SQLite;
    ``PostgresOutboxBase`` overrides what differs. The session steps (``hold``,
    ``end_stalled``) have nothing to do on SQLite, where one process writes."""

    dialect = "sqlite"

    true, false = "1", "0"  # boolean literals compared with ``ordered``

    def __init__(self) -> None:
        self.lane_where = LANE_ROWS_WHERE[self.dialect]
        self.loose_where = LOOSE_PENDING_WHERE[self.dialect]
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

    clock_sql = f"SELECT {SQLITE_EPOCH}"
    """The database's clock, in seconds since the epoch: every lease is dated and compared
    by it, so that nodes whose clocks disagree agree on when a lease runs out."""

    def clock(self) -> Steps[float]:
        """The database's time now (``clock_sql``)."""
        rows = yield Query(self.clock_sql)
        return float(rows[0][0])

    skip_locked = ""
    """What ends a read whose rows a claim locks (PostgreSQL's ``FOR UPDATE SKIP LOCKED``)."""

    def insert_from_arrays(self, first_id: str, source: str = "") -> str | None:
        """The INSERT of a group commit's delivery rows over arrays (PostgreSQL); None on
        SQLite, where the event log writes them with ``insert_values``."""
        return None

    @staticmethod
    def insert_arrays(rows: Sequence[tuple[int, int, str, str, bool]]) -> dict[str, list[Any]]:
        """The array parameters of ``insert_from_arrays`` for delivery rows (position of
        the event in the group from 1, simulation id, message type, URL, ordered)."""
        columns = list(zip(*rows, strict=True)) if rows else [(), (), (), (), ()]
        return {"w_pos": list(columns[0]), "w_sims": list(columns[1]),
                "w_types": list(columns[2]), "w_urls": list(columns[3]),
                "w_ordered": list(columns[4])}

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


class PostgresOutboxBase(OutboxBase):
    """What differs on PostgreSQL: its literals, no index hints, arrays for many rows."""

    clock_sql = "SELECT CAST(extract(epoch FROM clock_timestamp()) AS double precision)"

    dialect = "postgresql"

    true, false = "true", "false"

    fence = " OFFSET 0"

    skip_locked = " FOR UPDATE SKIP LOCKED"

    def hint(self, index: str) -> str:
        return ""

    def insert_from_arrays(self, first_id: str, source: str = "") -> str:
        """The INSERT of the delivery rows of one group commit, as one statement over
        arrays (``insert_arrays``' parameters), for a CTE of the event log's statement:
        ``first_id`` is the SQL of the id before the group's first event (a row's event id
        is it plus the event's position in the group, from 1); ``source``: what the rows
        are also selected from, before the arrays (``"c, "``: no row when ``c`` has none)."""
        return ("INSERT INTO webhook_deliveries (event_id, simulation_id, message_type, url, "
                "status, attempt_count, next_attempt_at, created_at, updated_at, ordered) "
                f"SELECT {first_id} + w.pos, w.sim, w.type, w.url, 'pending', 0, "
                "CAST(:now AS double precision), CAST(:now AS double precision), "
                "CAST(:now AS double precision), w.ordered "
                f"FROM {source}unnest(CAST(:w_pos AS bigint[]), CAST(:w_sims AS integer[]), "
                "CAST(:w_types AS varchar[]), CAST(:w_urls AS text[]), "
                "CAST(:w_ordered AS boolean[])) AS w(pos, sim, type, url, ordered)")
