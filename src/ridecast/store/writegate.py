"""One SQLite write transaction at a time per process, queued in asyncio, not in SQLite.

SQLite has one writer. Two connections of one process that both want it (the event log's
group commit and the webhook dispatcher's claim) meet in SQLite's busy handler, which sleeps
1, 2, 5, 10 ... up to 100 ms between tries and never queues: a claim that asks while the
group commit holds the lock sleeps, and under a steady ingest it keeps finding the lock
taken again, with every webhook unit of the process idle behind it.

``write_gate(conn)`` is a fair ``asyncio.Lock`` per SQLite engine and event loop: the step
transactions (``txsteps.run_on``: the event log's commits, the outbox's claims and records)
take it around their trip to the driver's thread, so within a process they wait their turn
in order, and reach SQLite only when the write lock is free. Other processes on the same file
(``ridecast worker``) still meet in the busy handler. PostgreSQL locks rows, not the
database: no gate.
"""

from __future__ import annotations

import asyncio
import weakref

from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection

_gates: weakref.WeakKeyDictionary[Engine, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def write_gate(conn: AsyncConnection) -> asyncio.Lock | None:
    """The gate of ``conn``'s engine in the running loop; None when it is not SQLite."""
    if conn.dialect.name != "sqlite":
        return None
    engine = conn.sync_engine
    loop = asyncio.get_running_loop()
    entry = _gates.get(engine)
    if entry is None or entry[0] is not loop:  # an engine reused by a later event loop
        entry = _gates[engine] = (loop, asyncio.Lock())
    return entry[1]


__all__ = ["write_gate"]
