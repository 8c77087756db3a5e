"""The delivery log: what was delivered and how, replay, the queue's gauges, retention.

Reads of ``webhook_deliveries`` and ``webhook_attempts`` for the API, and the writes that
need no claim (``store.outbox`` holds every statement): a replay queues a delivery that is
not in flight on a fresh schedule (``attempt_count`` back to 0, as Svix does: a replay after
the schedule ran out gets the whole schedule again); disabling marks waiting rows; the purge
removes finished rows. A success is kept on its delivery row (one write per delivered
event); the log shows it among the attempts, as the attempt row it stands for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncEngine

from ..store.outbox import NEWEST_ID_SQL, OutboxSql
from ..store.txsteps import Query, StepRunner, Steps
from .health import forget_before

Row = dict[str, Any]
# Characters counted for a delivery row beside its text columns (ids, times, names, keys).
ROW_OVERHEAD = 400
# A count of succeeded deliveries, or of all of a simulation's, reads its newest this many
# (and one): a long run's history is millions of rows, and the dashboard asks for the count
# every few seconds. Past it the count is marked inexact (at least that many match). Counts
# of deliveries pending, in flight, failed or disabled are exact: they read only those rows
# (``OutboxSql.count``).
COUNT_LIMIT = 10_000
_SUCCESS_COLUMNS = ("success_started_at", "success_latency_ms", "success_status_code",
                    "success_response_body")


def with_attempts(row: Mapping[str, Any], attempts: list[Row]) -> dict[str, Any]:
    """A delivery row as ``list`` and ``get`` give it: its attempts oldest first, the
    success kept on the row among them, as the attempt row it stands for."""
    item = {k: v for k, v in row.items() if k not in _SUCCESS_COLUMNS}
    if row["success_started_at"] is not None:
        attempts = [*attempts, {
            "id": None, "delivery_id": row["id"], "started_at": row["success_started_at"],
            "latency_ms": row["success_latency_ms"],
            "status_code": row["success_status_code"], "error_class": None, "error": None,
            "response_body": row["success_response_body"],
        }]
        # Oldest first. The kept success is the newest attempt unless a second sender of
        # the same delivery (its lease ran out) finished after it.
        attempts.sort(key=lambda a: a["started_at"])
    item["attempts"] = attempts
    item["ordered"] = bool(item.get("ordered", True))
    return item


@dataclass(frozen=True, slots=True)
class DeliveryPage:
    """One page of the log: its rows (with attempts), the count of the matching rows
    (``total_exact`` False: at least that many, counted among the simulation's newest
    deliveries, ``COUNT_LIMIT``), and whether the byte budget cut the page short (more rows
    follow although it holds fewer than asked)."""

    rows: list[Row]
    total: int
    total_exact: bool
    truncated: bool


class DeliveryLog:
    """The delivery log of the simulations (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, sql: OutboxSql, *,
                 count_limit: int = COUNT_LIMIT) -> None:
        self._sql = sql
        self._steps = StepRunner(engine)
        self._engine = engine
        self._count_limit = count_limit

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def page(
        self, simulation_id: int, *, status: str | None, message_type: str | None,
        limit: int, offset: int = 0, before: int | None = None, max_chars: int,
    ) -> DeliveryPage:
        """Deliveries of a simulation, newest first (below id ``before``), each with its
        attempts: at most ``limit``, and no more than fit in ``max_chars`` characters of
        text (at least one, however large). The page is sized from the column lengths
        before any row is loaded."""
        def steps() -> Steps[DeliveryPage]:
            sizes = yield from self._sql.page_sizes(simulation_id, status=status,
                                                    message_type=message_type, before=before,
                                                    limit=limit, offset=offset)
            kept, used = 0, 0
            for _id, size in sizes:
                used += size + ROW_OVERHEAD
                if kept and used > max_chars:
                    break
                kept += 1
            rows: list[Row] = []
            if kept:
                rows = yield from self._sql.page(simulation_id, status=status,
                                                 message_type=message_type,
                                                 before=sizes[0][0] + 1, limit=kept)
            total, exact = yield from self._sql.count(simulation_id, status=status,
                                                      message_type=message_type,
                                                      limit=self._count_limit)
            return DeliveryPage((yield from self._with_attempts(rows)), total, exact,
                                kept < len(sizes))

        return await self._steps.read(steps)

    def _with_attempts(self, rows: list[Row]) -> Steps[list[Row]]:
        attempts: dict[int, list[Row]] = {row["id"]: [] for row in rows}
        for attempt in (yield from self._sql.attempts_of(list(attempts))):
            attempts[attempt["delivery_id"]].append(attempt)
        return [with_attempts(row, attempts[row["id"]]) for row in rows]

    async def get(self, simulation_id: int, delivery_id: int) -> dict[str, Any] | None:
        """One delivery with its attempts; None when the simulation has no such delivery."""
        def steps() -> Steps[dict[str, Any] | None]:
            row = yield from self._sql.one(simulation_id, delivery_id)
            if row is None:
                return None
            return (yield from self._with_attempts([row]))[0]

        return await self._steps.read(steps)

    async def retry(self, simulation_id: int, delivery_id: int,
                    ) -> dict[str, Any] | Literal[False] | None:
        """Queue one delivery again, now, on a fresh schedule: the delivery as queued (read
        in the replay's own transaction, so a worker's claim right after it, on this node
        or another, never shows in the answer); None when it does not exist, False when it
        is in flight."""
        def steps() -> Steps[dict[str, Any] | Literal[False] | None]:
            # Due now by the store's clock, which the claims compare it with.
            now = yield from self._sql.clock()
            done = yield from self._sql.replay(simulation_id, delivery_id, now)
            if done is not True:
                return done
            row = yield from self._sql.one(simulation_id, delivery_id)
            if row is None:  # pragma: no cover - the replay just wrote it
                return None
            return (yield from self._with_attempts([row]))[0]

        return await self._steps.run(steps)

    async def retry_failed(self, simulation_id: int) -> int:
        """Queue every failed or disabled delivery of the simulation again (bulk replay)."""
        def steps() -> Steps[int]:
            now = yield from self._sql.clock()
            return (yield from self._sql.replay_failed(simulation_id, now))

        return await self._steps.run(steps)

    async def disable_pending(self, simulation_id: int, reason: str, token: str = "") -> int:
        """Mark the simulation's waiting deliveries ``disabled`` (its endpoint was disabled),
        but those of an ordered lane that a claim other than ``token`` (the caller's) holds:
        that claim's worker finds the endpoint disabled when it comes to them."""
        return await self._steps.run(
            lambda: self._sql.held(self._disable_steps(simulation_id, reason, token)))

    def _disable_steps(self, simulation_id: int, reason: str, token: str) -> Steps[int]:
        # The lane leases are compared by the store's clock, as the claims date them.
        now = yield from self._sql.clock()
        return (yield from self._sql.disable_pending(simulation_id, reason, now, token))

    async def depth(self) -> int:
        """Deliveries pending or in flight (the queue-depth gauge), from partial indexes."""
        def steps() -> Steps[int]:
            return int((yield Query(self._sql.depth_sql))[0][0] or 0)

        return await self._steps.read(steps)

    async def backlog(self, simulation_id: int | None = None,
                      ) -> list[tuple[int, int, float]]:
        """(simulation id, deliveries still to send, creation time of the oldest of them)
        for one simulation or every one with a backlog."""
        return await self._steps.read(lambda: self._sql.backlog(simulation_id))

    async def newest_id(self) -> int:
        """The highest delivery id in the outbox (0 when empty)."""
        def steps() -> Steps[int]:
            return int((yield Query(NEWEST_ID_SQL))[0][0] or 0)

        return await self._steps.read(steps)

    async def purge_older_than(self, cutoff: float) -> int:
        """Remove finished deliveries last changed before ``cutoff``, with their attempts,
        and the failing clocks not moved since."""
        def steps() -> Steps[int]:
            removed = yield from self._sql.purge(cutoff)
            yield from forget_before(cutoff)
            return removed

        return await self._steps.run(steps)


__all__ = ["COUNT_LIMIT", "DeliveryLog", "DeliveryPage", "with_attempts"]
