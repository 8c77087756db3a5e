"""The record: writes the outcome of finished attempts to the outbox, each under its claim.

A success is one write on the delivery row (its attempt kept on the row; an earlier success
there, from a replay, first moves to ``webhook_attempts``); any other outcome updates the
row and inserts its attempt; a ``RELEASE`` gives the row back, due now. Every one of these
statements names the claim token the result was sent under and the ``delivering`` status
(``store.outbox``): the result of a worker whose lease ran out, and whose rows another
worker took, changes nothing, and its attempt is not logged against the newer claim. A row
of an ordered unit other than its last is still ``pending`` while it is sent (the lane is
leased by the last row, ``claims.leased_rows``): its result is written only where the
unit's lane lease is found held, unexpired, before the transaction's first write
(``OutboxSql.lanes_held``).

``steps`` is the transaction's body, so the claimer records and claims in one transaction
(what a result frees, a lane or a slot, is claimed again at once).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from ..store.outbox import OutboxSql
from ..store.text import storable_or_none
from ..store.txsteps import StepRunner, Steps
from .health import end_streaks
from .jobs import RELEASE, Result


class Recorder:
    """Writes results (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, sql: OutboxSql) -> None:
        self._sql = sql
        self._steps = StepRunner(engine)

    async def record(self, results: Sequence[Result]) -> None:
        """Write the outcome of many attempts in one transaction (one commit per batch)."""
        if not results:
            return
        await self._steps.run(lambda: self._sql.held(self._at_store_time(results)))

    def _at_store_time(self, results: Sequence[Result]) -> Steps[None]:
        # The lane leases are compared by the store's clock, as the claims date them.
        now = yield from self._sql.clock()
        yield from self.steps(results, now)

    def steps(self, results: Sequence[Result], now: float) -> Steps[None]:
        """The writes of ``results`` at ``now``, as steps of the caller's transaction."""
        ok = [r for r in results if r.status == "succeeded" and r.last_error is None]
        released = [(r.delivery_id, r.token) for r in results if r.status == RELEASE]
        done = {r.delivery_id for r in ok} | {delivery_id for delivery_id, _t in released}
        rest = [r for r in results if r.delivery_id not in done]
        # The ordered units whose lane lease still holds, read before any write here (the
        # last row of a unit may be among them, and its write ends the lease): their pending
        # rows may be written. (Unordered rows are each leased: no lane to look for.)
        lanes = yield from self._sql.lanes_held(sorted(
            {r.token for r in results if r.ordered and r.status != RELEASE and r.token}), now)
        succeeded: set[int] = set()
        if ok:
            # attempt_count + 1 in SQL equals the dispatcher's count: a leased row has one
            # attempt in flight.
            succeeded = yield from self._sql.successes([
                (now, now, *(r.success or (None, None, None, None)), r.delivery_id, r.token,
                 int(r.token in lanes))
                for r in ok])
        if released:
            yield from self._sql.releases(now, released)
        # A failing streak ends on a success this claim wrote, not on a stale worker's.
        ended = {r.simulation_id for r in ok if r.delivery_id in succeeded}
        attempts = []
        for r in rest:
            # Free text of a failure, whatever made it: storable on both stores
            # (store/text.py), so that it cannot fail the other results of the batch.
            written = yield from self._sql.result(now, r.delivery_id, r.token, r.status,
                                                  r.attempt_count, r.next_attempt_at,
                                                  storable_or_none(r.last_error),
                                                  lane=r.token in lanes)
            if written and r.status == "succeeded":
                ended.add(r.simulation_id)
            if written and (a := r.attempt) is not None:
                attempts.append((r.delivery_id, a["started_at"], a["latency_ms"],
                                 a["status_code"], a["error_class"],
                                 storable_or_none(a["error"]),
                                 storable_or_none(a["response_body"])))
        yield from self._sql.attempts(attempts)
        yield from end_streaks(sorted(sim for sim in ended if sim is not None))


__all__ = ["Recorder"]
