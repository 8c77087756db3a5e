"""The event log: append with group commit, read after a cursor, retention.

One writer task owns every append. Requests queue their events and wait; the writer takes
everything queued (up to ``max_batch`` events), writes it in one transaction with the
webhook outbox rows of those events, and answers the waiting requests as soon as it has
committed. So ingest pays one commit (one fsync) per batch of concurrent requests, not per
event, and a request waits for its commit only.

Publishing is off that path: each committed batch goes to one publisher task, which hands
the batches to the bus strictly in commit order (so in ``event_id`` order) while the writer
is already writing the next one. Fan-out to the websocket streams and the webhook wake-up
never hold a commit. Committed but unpublished events count against the same back-pressure
limit as queued ones (``RIDECAST_INGEST_MAX_PENDING_EVENTS``), so a stalled bus makes
ingest refuse with 503 ``ingest_saturated`` rather than grow memory. A publish that fails is
logged and not retried here: the events are in the log, and a distributed bus fills the gap
from it (``bus/redis.py``); the in-process bus cannot fail.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from sqlalchemy import and_, delete, func, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..bus import Bus, StoredEvent
from ..bus.base import make_frame as make_frame  # re-exported: it lived here
from ..errors import RidecastError, ServiceUnavailable
from ..metrics import EVENTLOG_COMMIT_SECONDS, EVENTLOG_COMMITS, EVENTLOG_EVENTS
from .checkpointer import WalCheckpointer, disable_autocheckpoint
from .driver_sql import insert_qmark, insert_values
from .outbox import OutboxSql, outbox_sql
from .refusal import refuses_row
from .run_fence import POSTGRES_CHECK, LeaseLost, RunFence
from .tables import event_counter, events, first_id_since, simulations
from .txsteps import DriverThread, Many, Query, Steps, driver_thread, run_alone, run_on

log = logging.getLogger(__name__)

_EVENT_COLUMNS = ("id", "simulation_id", "message_type", "created_at", "body")

# Turns of the event loop the writer lets pass before it takes a group, while each turn
# queues more requests (``EventLog._gather``).
GATHER_TURNS = 8
COUNTER_SQL = ("UPDATE event_counter SET last_id = last_id + :count WHERE id = 1 "
               "RETURNING last_id")


def _group_sql(outbox: OutboxSql, *, fenced: bool = False) -> str | None:
    """A group commit on PostgreSQL in one statement: the counter moved, the events and
    their delivery rows inserted from arrays (one round trip and one executor run, not a
    statement per row); its one row is the last id taken (``_group_params``). None where
    the outbox inserts its rows statement by statement (SQLite).

    ``fenced``: only while a run's lease holds (``RunFence.params`` too): the counter moves
    only when the lease check (``POSTGRES_CHECK``, share-locking the lease row) finds its
    row, and the events and deliveries come from the counter's row, so a refused group
    writes nothing and returns no row."""
    if fenced:
        deliveries = outbox.insert_from_arrays("c.last_id - CAST(:count AS bigint)",
                                               source="c, ")
        check, guard = f"f AS ({POSTGRES_CHECK}), ", " AND EXISTS (SELECT 1 FROM f)"
    else:
        deliveries = outbox.insert_from_arrays(
            "(SELECT last_id FROM c) - CAST(:count AS bigint)")
        check = guard = ""
    if deliveries is None:
        return None
    return (
        f"WITH {check}c AS (UPDATE event_counter SET last_id = last_id + "
        f"CAST(:count AS bigint) WHERE id = 1{guard} RETURNING last_id), "
        "e AS (INSERT INTO events (id, simulation_id, message_type, created_at, body) "
        "SELECT c.last_id - CAST(:count AS bigint) + u.pos, u.sim, u.type, "
        "CAST(:now AS double precision), u.body FROM c, unnest(CAST(:sims AS integer[]), "
        "CAST(:types AS varchar[]), CAST(:bodies AS bytea[])) WITH ORDINALITY "
        "AS u(sim, type, body, pos)), "
        f"d AS ({deliveries}) "
        "SELECT last_id FROM c"
    )


def _group_params(flat: Sequence[NewEvent], now: float) -> dict[str, Any]:
    """The parameters of ``_group_sql`` for the events ``flat``."""
    return {
        "count": len(flat), "now": now,
        "sims": [e.simulation_id for e in flat], "types": [e.message_type for e in flat],
        "bodies": [e.body for e in flat],
        **OutboxSql.insert_arrays([
            (pos, e.simulation_id, e.message_type, e.webhook_url, e.webhook_ordered)
            for pos, e in enumerate(flat, 1) if e.webhook_url]),
    }


@dataclass(slots=True)
class NewEvent:
    """An event ready to append: validated, stamped and serialised once.

    When ``webhook_url`` is set, a delivery to it is written in the same transaction.
    Not frozen only because a frozen dataclass costs several times more to build, once per
    ingested event; nothing changes one after it is built.
    """

    simulation_id: int
    org_id: int
    owner_id: int
    message_type: str
    body: bytes
    webhook_url: str | None = None
    webhook_ordered: bool = True


# Bytes a page adds to each stored body: the frame's ``"event_id"`` and the separator.
FRAME_OVERHEAD = 40


def _read_conds(after: int, upto: int | None, simulation_id: int | None,
                message_types: Sequence[str] | None, org_id: int | None) -> list[Any]:
    """The WHERE clauses of a read of the log (``EventLog.read``, ``EventLog.page_end``)."""
    conds: list[Any] = [events.c.id > after, simulations.c.deleted_at.is_(None)]
    if upto is not None:
        conds.append(events.c.id <= upto)
    if simulation_id is not None:
        conds.append(events.c.simulation_id == simulation_id)
    if message_types:
        conds.append(events.c.message_type.in_(list(message_types)))
    if org_id is not None:
        conds.append(simulations.c.org_id == org_id)
    return conds


def _unavailable(what: str, exc: Exception) -> ServiceUnavailable:
    """A store failure as the error clients get (503 / close 4101), never the driver's."""
    return ServiceUnavailable(
        f"the event log could not {what} ({type(exc).__name__}); retry shortly", retry_after=1
    )


class _Request(NamedTuple):
    """A queued append: its events, the future of their stored form, and the lease its
    write depends on (a simulator run's owner), if any."""

    batch: Sequence[NewEvent]
    future: asyncio.Future[list[StoredEvent]]
    fence: RunFence | None


class AppendGate(Protocol):
    """What every batch passes before it is queued (the organisation's stored bytes)."""

    def within(self, batch: Sequence[NewEvent]) -> bool:
        """Whether ``admit`` would take ``batch``."""

    async def learn(self, batch: Sequence[NewEvent]) -> None:
        """Read what ``admit`` needs to decide on ``batch`` (when it does not hold it)."""

    def admit(self, batch: Sequence[NewEvent]) -> None:
        """Count ``batch``, or raise the error that refuses it."""


class EventLog:
    """Appends events (group commit), reads them back after a cursor, applies retention."""

    def __init__(
        self, engine: AsyncEngine, bus: Bus, *, max_batch: int = 2000,
        max_pending: int = 50_000, outbox: OutboxSql | None = None,
    ) -> None:
        self._engine = engine
        self._bus = bus
        self._max_batch = max_batch
        # Back-pressure: events queued but not yet written; beyond it, append refuses.
        self._max_pending = max_pending
        self._pending = 0
        self._queue: deque[_Request] = deque()
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        # Committed batches waiting for the publisher, in commit order.
        self._outgoing: deque[list[StoredEvent]] = deque()
        self._unpublished = 0
        self._outgoing_wake = asyncio.Event()
        self._publisher: asyncio.Task[None] | None = None
        self._conn: AsyncConnection | None = None
        self._closing = False
        self.commits = 0
        self.appended = 0
        # The organisations' stored-bytes quota (``limits/quota_service.py``), when wired.
        self.gate: AppendGate | None = None
        # The group commit's INSERTs (``?`` placeholders, see ``store.txsteps``).
        # On SQLite, many rows per statement (``Many``'s ``values``).
        self._insert_events = insert_qmark(engine.dialect, events, _EVENT_COLUMNS)
        # The outbox's rows, in ``store.outbox.INSERT_COLUMNS`` order (its owner's SQL): the
        # store's one ``OutboxSql``, given by the app (or this dialect's, alone).
        self._outbox = outbox if outbox is not None else outbox_sql(engine.dialect.name)
        self._events_values = insert_values(engine.dialect, events, _EVENT_COLUMNS)
        # On PostgreSQL the whole group commit is one statement over arrays (``_group_sql``).
        self._group_sql = _group_sql(self._outbox)
        self._fenced_group_sql = _group_sql(self._outbox, fenced=True)
        # On SQLite, the writer connection's driver thread: a group commit is one trip
        # there (``store.txsteps``). Set with the connection.
        self._thread: DriverThread | None = None
        self._styled: dict[str, str] = {}
        # On SQLite, WAL checkpoints run beside the commits, not inside one
        # (``store.checkpointer``).
        self._checkpointer = (WalCheckpointer(engine) if engine.dialect.name == "sqlite"
                              else None)
        self._checkpoint_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name="ridecast-eventlog-writer")
        self._writer.add_done_callback(self._writer_done)
        self._publisher = asyncio.create_task(self._publish_loop(),
                                              name="ridecast-eventlog-publisher")
        if self._checkpointer is not None:
            self._checkpoint_task = asyncio.create_task(self._checkpointer.run(),
                                                        name="ridecast-eventlog-checkpoints")

    @property
    def checkpoints(self) -> int:
        """WAL checkpoints its checkpointer ran (SQLite; 0 elsewhere)."""
        return 0 if self._checkpointer is None else self._checkpointer.checkpoints

    def _writer_done(self, task: asyncio.Task[None]) -> None:
        # The loop only ends on close; if it died, nobody would answer the waiting
        # requests: fail them now, and refuse new appends (``append`` checks the task).
        if task.cancelled() or task.exception() is None:
            return
        log.error("the event log writer died", exc_info=task.exception())
        while self._queue:
            future = self._queue.popleft().future
            if not future.done():
                future.set_exception(ServiceUnavailable(
                    "the event log writer stopped; nothing of this request was stored",
                    retry_after=5,
                ))
        self._pending = 0

    async def close(self) -> None:
        """Write what is queued, publish what is committed, then stop."""
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            await self._writer
            self._writer = None
        self._outgoing_wake.set()
        if self._publisher is not None:
            await self._publisher
            self._publisher = None
        if self._checkpointer is not None and self._checkpoint_task is not None:
            self._checkpointer.stop()
            await self._checkpoint_task
            self._checkpoint_task = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _writer_connection(self) -> AsyncConnection:
        # The writer keeps one connection: a pool checkout and reset per commit cost more
        # than the commit itself on SQLite.
        if self._conn is None or self._conn.closed:
            self._conn = await self._engine.connect()
            if self._group_sql is not None:
                await self._conn.execution_options(isolation_level="AUTOCOMMIT")
            self._thread = await driver_thread(self._conn)
            if self._thread is not None and self._checkpointer is not None:
                # Its commits no longer checkpoint: the checkpointer does (see there).
                await disable_autocheckpoint(self._thread)
        return self._conn

    async def append(self, batch: Sequence[NewEvent], *,
                     fence: RunFence | None = None) -> list[StoredEvent]:
        """Append ``batch`` atomically; returns the stored events once committed (they are
        published right after, in commit order). With ``fence``, only while that lease
        holds, checked in the commit's transaction (else ``LeaseLost``, nothing stored)."""
        # No shield needed: a caller that is cancelled cancels the future, and the writer
        # still writes the batch (it never looks at the future before it has committed).
        if self.gate is not None:
            await self.gate.learn(batch)
        return await self.append_nowait(batch, fence=fence)

    def within_quota(self, batch: Sequence[NewEvent]) -> bool:
        """True when ``gate`` would admit ``batch`` (the ingest fast path asks first)."""
        return self.gate is None or self.gate.within(batch)

    def accepts(self, count: int) -> bool:
        """True when ``append_nowait`` of ``count`` events would queue them, not refuse."""
        return self._refusal(count) is None

    def _refusal(self, count: int) -> ServiceUnavailable | None:
        """Why ``count`` events cannot be queued now; None when they can."""
        if self._closing or self._writer is None:
            return ServiceUnavailable("the event log is not accepting writes (shutting down)",
                                      retry_after=5)
        if self._writer.done():
            return ServiceUnavailable("the event log writer stopped; see the server log",
                                      retry_after=5)
        waiting = self._pending + self._unpublished
        if count and waiting + count > self._max_pending and waiting:
            return ServiceUnavailable(
                f"{waiting} events are waiting to be written or published "
                f"(RIDECAST_INGEST_MAX_PENDING_EVENTS={self._max_pending}); retry shortly",
                code="ingest_saturated", retry_after=1,
            )
        return None

    def append_nowait(self, batch: Sequence[NewEvent], *,
                      fence: RunFence | None = None) -> asyncio.Future[list[StoredEvent]]:
        """``append`` for a caller that does not await here: queues ``batch`` and returns
        the future of the stored events; raises what ``append`` raises."""
        refusal = self._refusal(len(batch))
        if refusal is not None:
            raise refusal
        if self.gate is not None:
            self.gate.admit(batch)
        future: asyncio.Future[list[StoredEvent]] = asyncio.get_running_loop().create_future()
        if not batch:
            future.set_result([])
            return future
        self._queue.append(_Request(batch, future, fence))
        self._pending += len(batch)
        self._wake.set()
        return future

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            await self._gather()
            self._wake.clear()
            while self._queue:
                group = self._take_group()
                self._pending -= sum(len(request.batch) for request in group)
                await self._commit(group)
            if self._closing and not self._queue:
                return

    async def _commit(self, group: list[_Request]) -> None:
        """Write ``group`` and answer its requests. When the store refuses a row of it
        (``store/refusal.py``), the group is written again in halves, down to single
        requests: only the requests whose rows it refuses fail (500 ``store_refused``),
        every other one is stored and answered as if it had been alone. Any other failure
        (an outage, a broken store) fails the group with 503, as it fails every write."""
        try:
            stored = await self._write(group)
        except LeaseLost as exc:  # a fenced request, alone in its group: nothing written
            for request in group:
                if not request.future.done():
                    request.future.set_exception(exc)
            return
        except Exception as exc:
            outage = isinstance(exc, ServiceUnavailable)  # logged by the engine
            await self._drop_connection()
            row = not outage and refuses_row(exc)
            if row and len(group) > 1:
                half = len(group) // 2
                await self._commit(group[:half])
                await self._commit(group[half:])
                return
            refused: RidecastError
            if not row:
                if not outage:
                    log.exception("event log write failed for %d requests", len(group))
                refused = ServiceUnavailable(
                    f"the store could not write the events ({type(exc).__name__}); "
                    "nothing of this request was stored", retry_after=1,
                )
            else:
                log.error("the store refused a row of an ingest request (%s: %s); that "
                          "request fails alone", type(exc).__name__, str(exc)[:300])
                refused = RidecastError(
                    f"the store refused this request's events ({type(exc).__name__}); "
                    "nothing of this request was stored", code="store_refused",
                )
            for request in group:
                if not request.future.done():
                    request.future.set_exception(refused)
            return
        flat = [event for per_request in stored for event in per_request]
        self._outgoing.append(flat)
        self._unpublished += len(flat)
        self._outgoing_wake.set()
        for request, result in zip(group, stored, strict=True):
            if not request.future.done():
                request.future.set_result(result)

    async def _gather(self) -> None:
        """Let the event loop run while requests keep joining the queue, up to
        ``GATHER_TURNS`` turns or a full group: requests whose bytes arrived together then
        share one commit (more events per commit: ``bench/ingest.py`` prints how many), and
        each commit costs two hand-offs to and from the driver's thread and a write of the
        WAL's pages, whatever its size.
        At a low rate the first turn adds nothing and the group is taken at once."""
        for _ in range(GATHER_TURNS):
            queued = len(self._queue)
            if self._pending >= self._max_batch:
                return
            await asyncio.sleep(0)
            if len(self._queue) == queued:
                return

    async def _publish_loop(self) -> None:
        """Hand committed batches to the bus, one at a time, in commit order."""
        while True:
            await self._outgoing_wake.wait()
            self._outgoing_wake.clear()
            while self._outgoing:
                # What was committed since the last publish goes out as one bus batch, up
                # to ``max_batch`` events (the hub accepts one batch whole, see
                # hub/connection.py): under load, fewer and larger batches.
                flat = self._outgoing.popleft()
                while (self._outgoing
                       and len(flat) + len(self._outgoing[0]) <= self._max_batch):
                    flat.extend(self._outgoing.popleft())
                try:
                    await self._bus.publish(flat)
                except ServiceUnavailable:
                    # The bus is down and has said so in the log (once, not per batch):
                    # stored is stored, consumers catch up from the log.
                    pass
                except Exception:  # stored is stored: consumers catch up from the log
                    log.exception("bus publish failed after commit of %d events", len(flat))
                finally:
                    self._unpublished -= len(flat)
            writer_done = self._writer is None or self._writer.done()
            if self._closing and writer_done and not self._outgoing:
                return

    async def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:
                log.exception("closing the writer connection failed")
            self._conn = None

    def _take_group(self) -> list[_Request]:
        # A request's batch is never split: it commits whole or not at all. A fenced one
        # commits alone: its lease may refuse it, and nothing else with it.
        group = [self._queue.popleft()]
        if group[0].fence is not None:
            return group
        count = len(group[0].batch)
        while (self._queue and self._queue[0].fence is None
               and count + len(self._queue[0].batch) <= self._max_batch):
            item = self._queue.popleft()
            group.append(item)
            count += len(item.batch)
        return group

    async def _write(self, group: list[_Request]) -> list[list[StoredEvent]]:
        now, started = time.time(), time.perf_counter()
        flat = [event for request in group for event in request.batch]
        fence = group[0].fence
        conn = await self._writer_connection()
        if self._group_sql is not None:
            # One statement is one transaction of its own: no BEGIN and COMMIT round trips
            # (the writer's connection is in autocommit, ``_writer_connection``).
            if fence is None:
                last = await run_alone(conn, self._group_steps(self._group_sql, flat, now))
            else:
                assert self._fenced_group_sql is not None
                last = await run_alone(conn, self._fenced_group_steps(
                    self._fenced_group_sql, fence, flat, now))
        elif fence is not None:
            last = await run_on(conn, self._fenced_steps(fence, flat, now),
                                thread=self._thread, styled=self._styled)
        else:
            last = await run_on(conn, self._write_steps(flat, now), thread=self._thread,
                                styled=self._styled)
        EVENTLOG_COMMIT_SECONDS.observe(time.perf_counter() - started)
        self.commits += 1
        self.appended += len(flat)
        if self._checkpointer is not None:
            self._checkpointer.committed(len(flat))
        EVENTLOG_COMMITS.inc()
        EVENTLOG_EVENTS.inc(len(flat))
        first = last - len(flat) + 1
        # Positional, in the field order: keyword arguments cost more, once per event. The
        # frame is built when a stream first reads it.
        stored = [
            StoredEvent(first + i, e.simulation_id, e.org_id, e.owner_id, e.message_type,
                        e.body, None, e.webhook_url is not None)
            for i, e in enumerate(flat)
        ]
        if len(group) == 1:
            return [stored]
        out: list[list[StoredEvent]] = []
        start = 0
        for request in group:
            out.append(stored[start:start + len(request.batch)])
            start += len(request.batch)
        return out

    @staticmethod
    def _group_steps(sql: str, flat: list[NewEvent], now: float) -> Steps[int]:
        """The group commit as ``_group_sql``, one statement; the last id taken."""
        found = yield Query(sql, _group_params(flat, now))
        if not found:
            raise RuntimeError("the event_counter row is missing (run the migrations)")
        return int(found[0][0])

    @staticmethod
    def _fenced_group_steps(sql: str, fence: RunFence, flat: list[NewEvent],
                            now: float) -> Steps[int]:
        """The fenced group commit as ``_group_sql(fenced=True)``, one statement."""
        found = yield Query(sql, {**_group_params(flat, now), **fence.params()})
        if not found:
            raise fence.refused(f"{len(flat)} events were")
        return int(found[0][0])

    def _fenced_steps(self, fence: RunFence, flat: list[NewEvent], now: float) -> Steps[int]:
        """``_write_steps`` after ``fence``'s check, in the same transaction."""
        if not (yield fence.check_step()):
            raise fence.refused(f"{len(flat)} events were")
        return (yield from self._write_steps(flat, now))

    def _write_steps(self, flat: list[NewEvent], now: float) -> Steps[int]:
        """The group commit as one step transaction (``store.txsteps``) on SQLite, where it
        is one trip to the driver's thread (PostgreSQL runs ``_group_sql``); the last id
        taken.

        Ids come from the one counter row, in the transaction that inserts the events: its
        lock makes every other writer (another process, another node) wait until this one
        commits, so ids are contiguous and rise in commit order. A reader that has seen id
        n has seen every id below it, which is what cursors and the Redis bus rely on.
        """
        found = yield Query(COUNTER_SQL, {"count": len(flat)})
        if not found:
            raise RuntimeError("the event_counter row is missing (run the migrations)")
        last = int(found[0][0])
        first = last - len(flat) + 1
        # To the driver as tuples (``_EVENT_COLUMNS``, ``outbox.INSERT_COLUMNS`` order): no
        # dict and no per-row processing by SQLAlchemy.
        yield Many(self._insert_events, [(first + i, e.simulation_id, e.message_type, now,
                                          e.body) for i, e in enumerate(flat)],
                   self._events_values)
        yield Many(self._outbox.insert, [
            (first + i, e.simulation_id, e.message_type, e.webhook_url, "pending", 0, now, now,
             now, e.webhook_ordered)
            for i, e in enumerate(flat) if e.webhook_url], self._outbox.insert_values)
        return last

    # ---- reads -------------------------------------------------------------------------

    async def read(
        self,
        *,
        after: int = 0,
        limit: int = 100,
        simulation_id: int | None = None,
        message_types: Sequence[str] | None = None,
        org_id: int | None = None,
        upto: int | None = None,
    ) -> list[StoredEvent]:
        """Events with ``event_id > after`` in order, optionally filtered.

        ``org_id`` limits to simulations of that organisation (the visibility rule for a
        non-admin); deleted simulations are never returned.
        """
        conds = _read_conds(after, upto, simulation_id, message_types, org_id)
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
        try:
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except SQLAlchemyError as exc:
            raise _unavailable("read", exc) from exc
        return [
            StoredEvent(
                event_id=row.id,
                simulation_id=row.simulation_id,
                org_id=row.org_id,
                owner_id=row.owner_id,
                message_type=row.message_type,
                body=row.body,
            )
            for row in rows
        ]

    async def page_end(
        self,
        *,
        after: int,
        limit: int,
        max_bytes: int,
        simulation_id: int | None = None,
        message_types: Sequence[str] | None = None,
    ) -> tuple[int | None, bool]:
        """The last ``event_id`` of the page ``read(after=, limit=, ...)`` would return,
        cut so that its frames hold at most ``max_bytes`` (at least one event, however
        large), and whether the budget cut it; None when no event follows ``after``.

        It reads ids and body lengths only, so a history of large events is sized without
        being loaded; ``read(..., upto=)`` then loads just the page.
        """
        conds = _read_conds(after, None, simulation_id, message_types, None)
        query = (
            select(events.c.id, func.length(events.c.body))
            .join(simulations, simulations.c.id == events.c.simulation_id)
            .where(and_(*conds))
            .order_by(events.c.id)
            .limit(limit)
        )
        try:
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except SQLAlchemyError as exc:
            raise _unavailable("read", exc) from exc
        end, used = None, 0
        for event_id, size in rows:
            used += int(size or 0) + FRAME_OVERHEAD
            if end is not None and used > max_bytes:
                return end, True
            end = event_id
        return end, False

    async def newest_id(self) -> int:
        """The newest committed event id: the counter row, as committed (0 when none)."""
        try:
            async with self._engine.connect() as conn:
                value = await conn.scalar(
                    select(event_counter.c.last_id).where(event_counter.c.id == 1)
                )
        except SQLAlchemyError as exc:
            raise _unavailable("read", exc) from exc
        return int(value or 0)

    async def read_range(self, after: int, upto: int) -> list[StoredEvent]:
        """Every event with ``after < event_id <= upto`` (of live simulations), in order."""
        out: list[StoredEvent] = []
        while after < upto:
            page = await self.read(after=after, limit=1000, upto=upto)
            out.extend(page)
            if len(page) < 1000:
                break
            after = page[-1].event_id
        return out

    async def bounds(self) -> tuple[int, int]:
        """(oldest retained event_id, newest event_id); (0, 0) when the log is empty."""
        try:
            async with self._engine.connect() as conn:
                row = (await conn.execute(
                    select(func.min(events.c.id), func.max(events.c.id))
                )).one()
        except SQLAlchemyError as exc:
            raise _unavailable("read", exc) from exc
        return (row[0] or 0, row[1] or 0)

    async def purge_older_than(self, cutoff: float) -> int:
        """Remove events created before ``cutoff`` (unix s), except those a delivery still needs
        (pending or in flight: read from the outbox's partial indexes)."""
        still_needed = text(f"events.id NOT IN ({self._outbox.active_event_ids})")
        async with self._engine.begin() as conn:
            bound = await conn.scalar(first_id_since(events, cutoff))
            old: list[Any] = [events.c.created_at < cutoff, still_needed]
            if bound is not None:
                old.append(events.c.id < bound)
            result = await conn.execute(delete(events).where(*old))
        return int(result.rowcount or 0)
