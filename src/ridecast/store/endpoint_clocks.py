"""The statements on ``webhook_endpoints``: the "failing since" clock of each simulation's
endpoint URL, which every worker reads and moves (the rule that moves it is the webhook
package's ``EndpointHealth``; the SQL and its dialect differences are here).

On PostgreSQL the clock's row is locked as it is read (SQLite's transaction holds the one
write lock already), and each transaction is ended by the server if its worker stops inside
it for ``hold_s`` (``pgsession.hold_sql``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from .pgsession import hold_sql
from .tables import webhook_endpoints
from .txsteps import Many, Query, Steps

E = webhook_endpoints


def end_streaks(simulation_ids: Sequence[int]) -> Steps[None]:
    """Steps that end the failing streaks of ``simulation_ids`` (a delivery succeeded), for
    the transaction that records the success."""
    if simulation_ids:
        yield Many("DELETE FROM webhook_endpoints WHERE simulation_id = ?",
                   [(sim,) for sim in sorted(simulation_ids)])


def forget_before(cutoff: float) -> Steps[None]:
    """Steps that drop failing clocks not moved since ``cutoff`` (retention). With the
    default retention (a week) that is far past the quiet gap, so no decision changes."""
    yield Query("DELETE FROM webhook_endpoints WHERE last_failure_at < :cutoff",
                {"cutoff": cutoff})


_CLEAR_OTHERS_SQL = "DELETE FROM webhook_endpoints WHERE simulation_id = :sim AND url <> :url"
_START_SQL = ("INSERT INTO webhook_endpoints (simulation_id, url, failing_since, "
              "last_failure_at) VALUES (:sim, :url, :now, :now) ON CONFLICT DO NOTHING")
_READ_SQL = ("SELECT failing_since, last_failure_at FROM webhook_endpoints "
             "WHERE simulation_id = :sim AND url = :url")
_MOVE_SQL = ("UPDATE webhook_endpoints SET failing_since = :since, last_failure_at = :last "
             "WHERE simulation_id = :sim AND url = :url")
_END_SQL = "DELETE FROM webhook_endpoints WHERE simulation_id = :sim"


class EndpointClockSql:
    """The failing clocks' statements of one dialect, as steps of the caller's
    transactions."""

    def __init__(self, dialect: str, *, hold_s: float = 2.0) -> None:
        postgres = dialect == "postgresql"
        self._read_sql = _READ_SQL + (" FOR UPDATE" if postgres else "")
        self._hold = Query(hold_sql(hold_s)) if postgres else None

    def held(self) -> Steps[None]:
        """The transaction's first step: on PostgreSQL, the server's hold on a stalled
        worker."""
        if self._hold is not None:  # a SET: no rows
            yield self._hold

    def clear_others(self, simulation_id: int, url: str) -> Steps[None]:
        """Forget the clocks of the simulation's other URLs (a URL change clears it)."""
        yield Query(_CLEAR_OTHERS_SQL, {"sim": simulation_id, "url": url})

    def start(self, simulation_id: int, url: str, now: float) -> Steps[None]:
        """Start a clock at ``now``, unless one is running."""
        yield Query(_START_SQL, {"sim": simulation_id, "url": url, "now": now})

    def read(self, simulation_id: int, url: str) -> Steps[tuple[float, float] | None]:
        """(failing_since, last_failure_at) of the URL's clock, locked; None if it has none."""
        rows = yield Query(self._read_sql, {"sim": simulation_id, "url": url})
        return (float(rows[0][0]), float(rows[0][1])) if rows else None

    def move(self, simulation_id: int, url: str, since: float, last: float) -> Steps[None]:
        """Set the URL's clock."""
        yield Query(_MOVE_SQL, {"sim": simulation_id, "url": url, "since": since,
                                "last": last})

    def end(self, simulation_id: int) -> Steps[None]:
        """End the simulation's failing streak."""
        yield Query(_END_SQL, {"sim": simulation_id})


async def failing_since(engine: AsyncEngine, simulation_id: int) -> tuple[str, float] | None:
    """The URL and start of the simulation's failing streak, if its endpoint is failing."""
    async with engine.connect() as conn:
        row = (await conn.execute(
            select(E.c.url, E.c.failing_since).where(E.c.simulation_id == simulation_id)
        )).first()
    return None if row is None else (row.url, row.failing_since)


__all__ = ["EndpointClockSql", "end_streaks", "failing_since", "forget_before"]
