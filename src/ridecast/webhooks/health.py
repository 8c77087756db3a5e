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
success of that simulation, and with it their claims, for as long as it is frozen.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..store.outbox import hold_sql
from ..store.tables import webhook_endpoints
from ..store.txsteps import Many, Query, Steps
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

# Tries of ``failed_in`` when another worker's success clears the clock it is reading.
CLOCK_RACE_TRIES = 3


class EndpointHealth:
    """Reads and moves the failing clocks; see the module docstring."""

    def __init__(self, engine: AsyncEngine, *, quiet_gap_s: float, hold_s: float = 2.0) -> None:
        self._engine = engine
        self._quiet_gap_s = quiet_gap_s
        postgres = engine.dialect.name == "postgresql"
        self._insert = pg_insert if postgres else sqlite_insert
        self._hold = text(hold_sql(hold_s)) if postgres else None

    async def failed(self, simulation_id: int, url: str, now: float) -> float:
        """Record a failure of ``url`` at ``now``; returns when its failing streak started."""
        async with self._engine.begin() as conn:
            return await self.failed_in(conn, simulation_id, url, now)

    async def failed_in(self, conn: AsyncConnection, simulation_id: int, url: str,
                        now: float) -> float:
        """``failed`` in the caller's transaction on ``conn``."""
        if self._hold is not None:
            await conn.execute(self._hold)
        await conn.execute(delete(E).where(E.c.simulation_id == simulation_id, E.c.url != url))
        for _ in range(CLOCK_RACE_TRIES):
            created = await conn.execute(
                self._insert(E)
                .values(simulation_id=simulation_id, url=url, failing_since=now,
                        last_failure_at=now)
                .on_conflict_do_nothing()
            )
            if int(created.rowcount or 0) == 1:
                return now
            row = (await conn.execute(
                select(E.c.failing_since, E.c.last_failure_at)
                .where(E.c.simulation_id == simulation_id, E.c.url == url)
                .with_for_update()
            )).first()
            if row is None:
                # A success elsewhere ended the streak between the two statements (READ
                # COMMITTED on PostgreSQL): this failure starts a new one.
                continue
            since = streak_start((row.failing_since, row.last_failure_at), now,
                                 quiet_gap_s=self._quiet_gap_s)
            await conn.execute(
                update(E)
                .where(E.c.simulation_id == simulation_id, E.c.url == url)
                .values(failing_since=since, last_failure_at=max(now, row.last_failure_at))
            )
            return since
        return now  # the clock keeps being cleared: a streak that keeps ending starts now

    async def succeeded(self, simulation_id: int) -> None:
        """End the simulation's failing streak (a delivery to its endpoint succeeded)."""
        async with self._engine.begin() as conn:
            if self._hold is not None:
                await conn.execute(self._hold)
            await conn.execute(delete(E).where(E.c.simulation_id == simulation_id))

    async def failing_since(self, simulation_id: int) -> tuple[str, float] | None:
        """The URL and start of the simulation's failing streak, if its endpoint is failing."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(
                select(E.c.url, E.c.failing_since).where(E.c.simulation_id == simulation_id)
            )).first()
        return None if row is None else (row.url, row.failing_since)


__all__ = ["EndpointHealth", "end_streaks", "forget_before"]
