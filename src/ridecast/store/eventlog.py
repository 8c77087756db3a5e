"""The event log: append with group commit, read after a cursor, retention.

One writer task owns every append. Requests queue their events and wait; the writer takes
everything queued (up to ``max_batch`` events), writes it in one transaction with the
webhook outbox rows of those events, publishes the stored events to the bus in commit order,
then answers the waiting requests. So ingest pays one commit (one fsync) per batch of
concurrent requests, not per event, and the bus sees events in ``event_id`` order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import and_, delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..bus import Bus, StoredEvent
from ..errors import ServiceUnavailable
from .tables import events, simulations, webhook_deliveries

log = logging.getLogger(__name__)

ACTIVE_DELIVERY_STATES = ("pending", "delivering")


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event ready to append: validated, stamped and serialised once.

    When ``webhook_url`` is set, a delivery to it is written in the same transaction.
    """

    simulation_id: int
    org_id: int
    owner_id: int
    message_type: str
    body: bytes
    webhook_url: str | None = None
    webhook_ordered: bool = True


def make_frame(body: bytes, event_id: int) -> bytes:
    """The websocket frame: the envelope JSON with ``event_id`` appended as a string."""
    return b'%s,"event_id":"%d"}' % (body[:-1], event_id)


class EventLog:
    """Appends events (group commit), reads them back after a cursor, applies retention."""

    def __init__(self, engine: AsyncEngine, bus: Bus, *, max_batch: int = 2000) -> None:
        self._engine = engine
        self._bus = bus
        self._max_batch = max_batch
        self._queue: deque[tuple[Sequence[NewEvent], asyncio.Future[list[StoredEvent]]]] = (
            deque()
        )
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._conn: AsyncConnection | None = None
        self._closing = False
        self.commits = 0
        self.appended = 0

    async def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name="ridecast-eventlog-writer")

    async def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            await self._writer
            self._writer = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _writer_connection(self) -> AsyncConnection:
        # The writer keeps one connection: a pool checkout and reset per commit cost more
        # than the commit itself on SQLite.
        if self._conn is None or self._conn.closed:
            self._conn = await self._engine.connect()
        return self._conn

    async def append(self, batch: Sequence[NewEvent]) -> list[StoredEvent]:
        """Append ``batch`` atomically; returns the stored events once committed and published."""
        if self._closing or self._writer is None:
            raise ServiceUnavailable("the event log is not accepting writes (shutting down)")
        if not batch:
            return []
        future: asyncio.Future[list[StoredEvent]] = asyncio.get_running_loop().create_future()
        self._queue.append((batch, future))
        self._wake.set()
        return await asyncio.shield(future)

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                group = self._take_group()
                try:
                    stored = await self._write(group)
                except Exception as exc:
                    log.exception("event log write failed for %d requests", len(group))
                    await self._drop_connection()
                    for _batch, future in group:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                flat = [event for per_request in stored for event in per_request]
                try:
                    await self._bus.publish(flat)
                except Exception:  # stored is stored: consumers catch up from the log
                    log.exception("bus publish failed after commit of %d events", len(flat))
                for (_batch, future), result in zip(group, stored, strict=True):
                    if not future.done():
                        future.set_result(result)
            if self._closing and not self._queue:
                return

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:
                log.exception("closing the writer connection failed")
            self._conn = None

    def _take_group(
        self,
    ) -> list[tuple[Sequence[NewEvent], asyncio.Future[list[StoredEvent]]]]:
        # A request's batch is never split: it commits whole or not at all.
        group = [self._queue.popleft()]
        count = len(group[0][0])
        while self._queue and count + len(self._queue[0][0]) <= self._max_batch:
            item = self._queue.popleft()
            group.append(item)
            count += len(item[0])
        return group

    async def _write(
        self, group: list[tuple[Sequence[NewEvent], asyncio.Future[list[StoredEvent]]]]
    ) -> list[list[StoredEvent]]:
        now = time.time()
        flat = [event for batch, _future in group for event in batch]
        rows = [
            {
                "simulation_id": e.simulation_id,
                "message_type": e.message_type,
                "created_at": now,
                "body": e.body,
            }
            for e in flat
        ]
        conn = await self._writer_connection()
        async with conn.begin():
            result = await conn.execute(insert(events).returning(events.c.id), rows)
            # Ids rise in row order within one INSERT (SQLite holds the write lock; a
            # PostgreSQL sequence hands out values row by row), so sorting maps them back to
            # rows. sort_by_parameter_order would do the same 8x slower on SQLite.
            ids = sorted(row[0] for row in result)
            outbox = [
                {
                    "event_id": event_id,
                    "simulation_id": e.simulation_id,
                    "message_type": e.message_type,
                    "url": e.webhook_url,
                    "status": "pending",
                    "attempt_count": 0,
                    "next_attempt_at": now,
                    "created_at": now,
                    "updated_at": now,
                    "ordered": e.webhook_ordered,
                }
                for e, event_id in zip(flat, ids, strict=True)
                if e.webhook_url
            ]
            if outbox:
                await conn.execute(insert(webhook_deliveries), outbox)
        self.commits += 1
        self.appended += len(flat)
        out: list[list[StoredEvent]] = []
        it = iter(zip(flat, ids, strict=True))
        for batch, _future in group:
            out.append(
                [
                    StoredEvent(
                        event_id=event_id,
                        simulation_id=e.simulation_id,
                        org_id=e.org_id,
                        owner_id=e.owner_id,
                        message_type=e.message_type,
                        body=e.body,
                        frame=make_frame(e.body, event_id),
                        has_webhook=e.webhook_url is not None,
                    )
                    for e, event_id in (next(it) for _ in batch)
                ]
            )
        return out

    # ---- reads -------------------------------------------------------------------------

    async def read(
        self,
        *,
        after: int = 0,
        limit: int = 100,
        simulation_id: int | None = None,
        message_types: Sequence[str] | None = None,
        org_id: int | None = None,
    ) -> list[StoredEvent]:
        """Events with ``event_id > after`` in order, optionally filtered.

        ``org_id`` limits to simulations of that organisation (the visibility rule for a
        non-admin); deleted simulations are never returned.
        """
        conds = [events.c.id > after, simulations.c.deleted_at.is_(None)]
        if simulation_id is not None:
            conds.append(events.c.simulation_id == simulation_id)
        if message_types:
            conds.append(events.c.message_type.in_(list(message_types)))
        if org_id is not None:
            conds.append(simulations.c.org_id == org_id)
        query = (
            select(
                events.c.id,
                events.c.simulation_id,
                events.c.message_type,
                events.c.body,
                simulations.c.org_id,
                simulations.c.owner_id,
            )
            .join(simulations, simulations.c.id == events.c.simulation_id)
            .where(and_(*conds))
            .order_by(events.c.id)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            StoredEvent(
                event_id=row.id,
                simulation_id=row.simulation_id,
                org_id=row.org_id,
                owner_id=row.owner_id,
                message_type=row.message_type,
                body=row.body,
                frame=make_frame(row.body, row.id),
            )
            for row in rows
        ]

    async def bounds(self) -> tuple[int, int]:
        """(oldest retained event_id, newest event_id); (0, 0) when the log is empty."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(func.min(events.c.id), func.max(events.c.id)))).one()
        return (row[0] or 0, row[1] or 0)

    async def purge_older_than(self, cutoff: float) -> int:
        """Remove events created before ``cutoff`` (unix s), except those a delivery still needs."""
        still_needed = select(webhook_deliveries.c.event_id).where(
            webhook_deliveries.c.status.in_(ACTIVE_DELIVERY_STATES)
        )
        async with self._engine.begin() as conn:
            result = await conn.execute(
                delete(events).where(events.c.created_at < cutoff, events.c.id.not_in(still_needed))
            )
        return int(result.rowcount or 0)
