"""The "failing since" clock of each simulation's endpoint URL, kept in the store.

Every worker process reads and moves the same clock (table ``webhook_endpoints``), so a
restart or a second worker neither resets nor forks it. The rule itself is
``retry.streak_start``; this module only applies it atomically:

* a failure starts the clock (or continues the current streak; after a quiet gap it starts
  again), and forgets the clock of any other URL of the simulation: a URL change clears it;
* a success deletes the row (``recorder.Recorder`` does that, with ``end_streaks``, in the
  transaction that records the success).

On PostgreSQL each of this module's transactions is ended by the server if its worker stops
inside it for ``hold_s`` (as the outbox's are, ``store.outbox``'s ``hold``): a worker frozen
while it holds a clock's row lock would otherwise stop every other worker's record of a
success of that simulation, and with it their claims, for as long as it is frozen. They are
step transactions (``store.txsteps``), so on PostgreSQL their statements are prepared before
the transaction begins (``store.pgsteps``): a worker stopped between asyncpg's prepare and
its bind would be out of that timeout's reach.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from ..store.outbox import hold_sql
from ..store.tables import webhook_endpoints
from ..store.txsteps import Many, Query, StepRunner, Steps
from .retry import streak_start

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

# Tries of ``failed`` when another worker's success clears the clock it is reading.
CLOCK_RACE_TRIES = 3

_CLEAR_OTHERS_SQL = "DELETE FROM webhook_endpoints WHERE simulation_id = :sim AND url <> :url"
_START_SQL = ("INSERT INTO webhook_endpoints (simulation_id, url, failing_since, "
              "last_failure_at) VALUES (:sim, :url, :now, :now) ON CONFLICT DO NOTHING")
_READ_SQL = ("SELECT failing_since, last_failure_at FROM webhook_endpoints "
             "WHERE simulation_id = :sim AND url = :url")
_MOVE_SQL = ("UPDATE webhook_endpoints SET failing_since = :since, last_failure_at = :last "
             "WHERE simulation_id = :sim AND url = :url")
_END_SQL = "DELETE FROM webhook_endpoints WHERE simulation_id = :sim"


class EndpointHealth:
    """Reads and moves the failing clocks; see the module docstring."""

    def __init__(self, engine: AsyncEngine, *, quiet_gap_s: float, hold_s: float = 2.0) -> None:
        self._engine = engine
        self._quiet_gap_s = quiet_gap_s
        self._steps = StepRunner(engine)
        postgres = engine.dialect.name == "postgresql"
        # PostgreSQL: the row is locked as it is read (SQLite's transaction holds the one
        # write lock already), and the server ends the transaction of a stalled worker.
        self._read_sql = _READ_SQL + (" FOR UPDATE" if postgres else "")
        self._hold = Query(hold_sql(hold_s)) if postgres else None

    async def failed(self, simulation_id: int, url: str, now: float) -> float:
        """Record a failure of ``url`` at ``now``; returns when its failing streak started."""
        return await self._steps.run(lambda: self.failure(simulation_id, url, now))

    def failure(self, simulation_id: int, url: str, now: float) -> Steps[float]:
        """``failed`` as steps, for a transaction of the caller's."""
        yield from self._held()
        key = {"sim": simulation_id, "url": url}
        yield Query(_CLEAR_OTHERS_SQL, key)
        for _ in range(CLOCK_RACE_TRIES):
            yield Query(_START_SQL, {**key, "now": now})  # a new streak, unless one is on
            rows = yield Query(self._read_sql, key)
            if not rows:
                # A success elsewhere ended the streak between the two statements (READ
                # COMMITTED on PostgreSQL): this failure starts a new one.
                continue
            was = (float(rows[0][0]), float(rows[0][1]))
            since = streak_start(was, now, quiet_gap_s=self._quiet_gap_s)
            if (since, max(now, was[1])) != was:  # the row this failure inserted is as it is
                yield Query(_MOVE_SQL, {**key, "since": since, "last": max(now, was[1])})
            return since
        return now  # the clock keeps being cleared: a streak that keeps ending starts now

    def _held(self) -> Steps[None]:
        if self._hold is not None:  # a SET: no rows
            yield self._hold

    async def succeeded(self, simulation_id: int) -> None:
        """End the simulation's failing streak (a delivery to its endpoint succeeded)."""
        await self._steps.run(lambda: self._succeeded(simulation_id))

    def _succeeded(self, simulation_id: int) -> Steps[None]:
        yield from self._held()
        yield Query(_END_SQL, {"sim": simulation_id})

    async def failing_since(self, simulation_id: int) -> tuple[str, float] | None:
        """The URL and start of the simulation's failing streak, if its endpoint is failing."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(
                select(E.c.url, E.c.failing_since).where(E.c.simulation_id == simulation_id)
            )).first()
        return None if row is None else (row.url, row.failing_since)


__all__ = ["EndpointHealth", "end_streaks", "forget_before"]
