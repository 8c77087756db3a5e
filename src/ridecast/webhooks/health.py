"""The "failing since" clock of each simulation's endpoint URL, kept in the store.

Every worker process reads and moves the same clock (table ``webhook_endpoints``, its
statements in ``store.endpoint_clocks``), so a restart or a second worker neither resets nor
forks it. The rule itself is ``retry.streak_start``; this module only applies it atomically:

* a failure starts the clock (or continues the current streak; after a quiet gap it starts
  again), and forgets the clock of any other URL of the simulation: a URL change clears it;
* a success deletes the row (``recorder.Recorder`` does that, with ``end_streaks``, in the
  transaction that records the success).

On PostgreSQL each of this module's transactions is ended by the server if its worker stops
inside it for ``hold_s`` (as the outbox's are, ``store.pgsession``): a worker frozen
while it holds a clock's row lock would otherwise stop every other worker's record of a
success of that simulation, and with it their claims, for as long as it is frozen. They are
step transactions (``store.txsteps``), so on PostgreSQL their statements are prepared before
the transaction begins (``store.pgsteps``): a worker stopped between asyncpg's prepare and
its bind would be out of that timeout's reach.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from ..store.endpoint_clocks import EndpointClockSql, end_streaks, failing_since, forget_before
from ..store.txsteps import StepRunner, Steps
from .retry import streak_start

# Tries of ``failed`` when another worker's success clears the clock it is reading.
CLOCK_RACE_TRIES = 3


class EndpointHealth:
    """Reads and moves the failing clocks; see the module docstring."""

    def __init__(self, engine: AsyncEngine, *, quiet_gap_s: float, hold_s: float = 2.0) -> None:
        self._engine = engine
        self._quiet_gap_s = quiet_gap_s
        self._steps = StepRunner(engine)
        self._sql = EndpointClockSql(engine.dialect.name, hold_s=hold_s)

    async def failed(self, simulation_id: int, url: str, now: float) -> float:
        """Record a failure of ``url`` at ``now``; returns when its failing streak started."""
        return await self._steps.run(lambda: self.failure(simulation_id, url, now))

    def failure(self, simulation_id: int, url: str, now: float) -> Steps[float]:
        """``failed`` as steps, for a transaction of the caller's."""
        yield from self._sql.held()
        yield from self._sql.clear_others(simulation_id, url)
        for _ in range(CLOCK_RACE_TRIES):
            # A new streak, unless one is on.
            yield from self._sql.start(simulation_id, url, now)
            was = yield from self._sql.read(simulation_id, url)
            if was is None:
                # A success elsewhere ended the streak between the two statements (READ
                # COMMITTED on PostgreSQL): this failure starts a new one.
                continue
            since = streak_start(was, now, quiet_gap_s=self._quiet_gap_s)
            if (since, max(now, was[1])) != was:  # the row this failure inserted is as it is
                yield from self._sql.move(simulation_id, url, since, max(now, was[1]))
            return since
        return now  # the clock keeps being cleared: a streak that keeps ending starts now

    async def succeeded(self, simulation_id: int) -> None:
        """End the simulation's failing streak (a delivery to its endpoint succeeded)."""
        await self._steps.run(lambda: self._succeeded(simulation_id))

    def _succeeded(self, simulation_id: int) -> Steps[None]:
        yield from self._sql.held()
        yield from self._sql.end(simulation_id)

    async def failing_since(self, simulation_id: int) -> tuple[str, float] | None:
        """The URL and start of the simulation's failing streak, if its endpoint is failing."""
        return await failing_since(self._engine, simulation_id)


__all__ = ["EndpointHealth", "end_streaks", "forget_before"]
