"""The webhook outbox in the store: claim due deliveries with a lease, record attempts, replay.

``EventLog.append`` writes a ``pending`` delivery in the transaction of its event. A
dispatcher (in ``serve`` or in a ``ridecast worker``) claims due rows by setting them
``delivering`` with a ``lease_until``; a row whose lease ran out (its process died or hung)
is due again, so a kill -9 at any moment loses nothing: deliveries are at least once.

Claiming is one statement, ``UPDATE ... WHERE id IN (SELECT ... LIMIT n) RETURNING``: atomic
on SQLite (one writer at a time) and, with ``FOR UPDATE SKIP LOCKED`` in the sub-select,
on PostgreSQL, where several workers then never wait for each other's rows.

Statuses: pending -> delivering -> succeeded | pending (retry) | failed | disabled.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from ..store.tables import events, webhook_attempts, webhook_deliveries

D = webhook_deliveries
A = webhook_attempts

TERMINAL_STATES = ("succeeded", "failed", "disabled")
STATES = ("pending", "delivering", *TERMINAL_STATES)


@dataclass(frozen=True, slots=True)
class Job:
    """A claimed delivery, with the event body to send."""

    delivery_id: int
    event_id: int
    simulation_id: int
    message_type: str
    url: str
    attempt_count: int
    body: bytes | None  # None when retention removed the event (cannot be sent)

    @property
    def msg_id(self) -> str:
        """The ``webhook-id``: one per event, the same on every retry (receivers dedupe)."""
        return f"msg_{self.event_id}"


@dataclass(frozen=True, slots=True)
class Result:
    """The new state of a delivery after an attempt (``attempt`` None: none was made)."""

    delivery_id: int
    status: str
    attempt_count: int
    next_attempt_at: float
    last_error: str | None
    attempt: dict[str, Any] | None = None


class Outbox:
    """Queries on ``webhook_deliveries`` and ``webhook_attempts``."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def claim(
        self, limit: int, *, lease_s: float, exclude_urls: Sequence[str] = ()
    ) -> list[Job]:
        """Lease up to ``limit`` due deliveries (oldest first), skipping saturated endpoints."""
        now = time.time()
        due = or_(
            and_(D.c.status == "pending", D.c.next_attempt_at <= now),
            and_(D.c.status == "delivering", D.c.lease_until < now),
        )
        conds = [due]
        if exclude_urls:
            conds.append(D.c.url.not_in(list(exclude_urls)))
        picked = (
            select(D.c.id)
            .where(*conds)
            .order_by(D.c.next_attempt_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        claim = (
            update(D)
            .where(D.c.id.in_(picked))
            .values(status="delivering", lease_until=now + lease_s, updated_at=now)
            .returning(
                D.c.id, D.c.event_id, D.c.simulation_id, D.c.message_type, D.c.url,
                D.c.attempt_count,
            )
        )
        async with self._engine.begin() as conn:
            rows = list((await conn.execute(claim)).all())
            if not rows:
                return []
            ids = [row.event_id for row in rows]
            found = await conn.execute(
                select(events.c.id, events.c.body).where(events.c.id.in_(ids))
            )
            bodies: dict[int, bytes] = {row[0]: row[1] for row in found}
        rows.sort(key=lambda row: row.event_id)
        return [
            Job(row.id, row.event_id, row.simulation_id, row.message_type, row.url,
                row.attempt_count, bodies.get(row.event_id))
            for row in rows
        ]

    async def record(self, results: Sequence[Result]) -> None:
        """Write the outcome of many attempts in one transaction (one commit per batch)."""
        if not results:
            return
        now = time.time()
        # Successes, the common case, take one statement: attempt_count + 1 equals the
        # count the dispatcher computed, since a leased row has one attempt in flight.
        ok = [r.delivery_id for r in results if r.status == "succeeded" and r.last_error is None]
        ok_set = set(ok)
        rest = [r for r in results if r.delivery_id not in ok_set]
        params = [
            {
                "b_id": r.delivery_id,
                "b_status": r.status,
                "b_count": r.attempt_count,
                "b_next": r.next_attempt_at,
                "b_error": r.last_error,
                "b_now": now,
            }
            for r in rest
        ]
        stmt = (
            update(D)
            .where(D.c.id == bindparam("b_id"))
            .values(
                status=bindparam("b_status"),
                attempt_count=bindparam("b_count"),
                next_attempt_at=bindparam("b_next"),
                last_error=bindparam("b_error"),
                lease_until=None,
                updated_at=bindparam("b_now"),
            )
        )
        attempts = [
            {"delivery_id": r.delivery_id, **r.attempt} for r in results if r.attempt is not None
        ]
        async with self._engine.begin() as conn:
            if ok:
                await conn.execute(
                    update(D)
                    .where(D.c.id.in_(ok))
                    .values(status="succeeded", attempt_count=D.c.attempt_count + 1,
                            next_attempt_at=now, last_error=None, lease_until=None,
                            updated_at=now)
                )
            if params:
                await conn.execute(stmt.execution_options(synchronize_session=False), params)
            if attempts:
                await conn.execute(insert(A), attempts)

    async def release(self, delivery_ids: Sequence[int]) -> None:
        """Give leased deliveries back (due now) when a dispatcher stops before sending them."""
        if not delivery_ids:
            return
        async with self._engine.begin() as conn:
            await conn.execute(
                update(D)
                .where(D.c.id.in_(list(delivery_ids)), D.c.status == "delivering")
                .values(status="pending", lease_until=None, updated_at=time.time())
            )

    async def disable_pending(self, simulation_id: int, reason: str) -> int:
        """Mark the simulation's waiting deliveries ``disabled`` (its endpoint was disabled)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(D)
                .where(D.c.simulation_id == simulation_id, D.c.status == "pending")
                .values(status="disabled", last_error=reason, updated_at=time.time())
            )
        return int(result.rowcount or 0)

    async def retry(self, simulation_id: int, delivery_id: int) -> bool | None:
        """Queue one delivery again, now; None when it does not exist, False when in flight."""
        now = time.time()
        async with self._engine.begin() as conn:
            status = await conn.scalar(
                select(D.c.status).where(D.c.id == delivery_id, D.c.simulation_id == simulation_id)
            )
            if status is None:
                return None
            if status == "delivering":
                return False
            await conn.execute(
                update(D)
                .where(D.c.id == delivery_id)
                .values(status="pending", next_attempt_at=now, lease_until=None, updated_at=now)
            )
        return True

    async def retry_failed(self, simulation_id: int) -> int:
        """Queue every failed or disabled delivery of the simulation again (bulk replay)."""
        now = time.time()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(D)
                .where(D.c.simulation_id == simulation_id, D.c.status.in_(("failed", "disabled")))
                .values(status="pending", next_attempt_at=now, lease_until=None, updated_at=now)
            )
        return int(result.rowcount or 0)

    async def list(
        self,
        simulation_id: int,
        *,
        status: str | None,
        message_type: str | None,
        limit: int,
        offset: int,
    ) -> tuple[list[dict[str, Any]], int]:
        """Deliveries of a simulation, newest first, each with its attempts; and the total."""
        conds = [D.c.simulation_id == simulation_id]
        if status:
            conds.append(D.c.status == status)
        if message_type:
            conds.append(D.c.message_type == message_type)
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(D).where(*conds).order_by(D.c.id.desc()).limit(limit).offset(offset)
                )
            ).mappings().all()
            total = await conn.scalar(select(func.count()).select_from(D).where(*conds))
            ids = [row["id"] for row in rows]
            attempts: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
            if ids:
                for att in (
                    await conn.execute(
                        select(A).where(A.c.delivery_id.in_(ids)).order_by(A.c.id)
                    )
                ).mappings():
                    attempts[att["delivery_id"]].append(dict(att))
        out = []
        for row in rows:
            item = dict(row)
            item["attempts"] = attempts[row["id"]]
            out.append(item)
        return out, int(total or 0)

    async def get(self, simulation_id: int, delivery_id: int) -> dict[str, Any] | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(D).where(D.c.id == delivery_id, D.c.simulation_id == simulation_id)
                )
            ).mappings().first()
            if row is None:
                return None
            item = dict(row)
            item["attempts"] = [
                dict(a)
                for a in (
                    await conn.execute(
                        select(A).where(A.c.delivery_id == delivery_id).order_by(A.c.id)
                    )
                ).mappings()
            ]
        return item

    async def depth(self) -> int:
        """Deliveries pending or in flight (the queue-depth gauge)."""
        async with self._engine.connect() as conn:
            count = await conn.scalar(
                select(func.count()).select_from(D).where(D.c.status.in_(("pending", "delivering")))
            )
        return int(count or 0)

    async def purge_older_than(self, cutoff: float) -> int:
        """Remove finished deliveries last changed before ``cutoff``, with their attempts."""
        old = select(D.c.id).where(D.c.status.in_(TERMINAL_STATES), D.c.updated_at < cutoff)
        async with self._engine.begin() as conn:
            await conn.execute(delete(A).where(A.c.delivery_id.in_(old)))
            result = await conn.execute(delete(D).where(D.c.id.in_(old)))
        return int(result.rowcount or 0)


__all__ = ["STATES", "Job", "Outbox", "Result"]
