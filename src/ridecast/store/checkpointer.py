"""SQLite's WAL checkpoints, run beside the event log's commits rather than inside one.

By default SQLite checkpoints in the connection whose commit takes the write-ahead log past
1,000 pages: that commit then also copies the pages back into the database file and syncs
the file twice (``synchronous=NORMAL``), and every event in it, and every request queued
behind it, waits for that. The event log's writer connection turns this off (``PRAGMA
wal_autocheckpoint=0``, see ``disable_autocheckpoint``), and ``WalCheckpointer`` runs a
PASSIVE checkpoint on a connection of its own instead: once ``CHECKPOINT_EVENTS`` events
were committed since the last one, else within ``CHECKPOINT_INTERVAL_S`` of a commit. A
PASSIVE checkpoint waits for no reader or writer: commits go on while it runs, on another
thread. Other connections keep SQLite's default: the webhook claims write much in a burst,
and a checkpoint one of them runs (the WAL past 1,000 pages between two of ours) holds a
claim, not an ingest request, and is one the event log's commits do not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3

from sqlalchemy.ext.asyncio import AsyncEngine

from .txsteps import DriverThread

log = logging.getLogger(__name__)

CHECKPOINT_EVENTS = 5_000
"""Events committed since the last checkpoint that start the next one at once."""
CHECKPOINT_INTERVAL_S = 1.0
"""The longest a committed event waits for its checkpoint (with fewer events than above)."""


def _autocheckpoint_off(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA wal_autocheckpoint=0").close()


async def disable_autocheckpoint(thread: DriverThread) -> None:
    """Turn SQLite's checkpoint-on-commit off for the connection of ``thread`` (a
    ``txsteps.driver_thread``): its commits no longer run checkpoints."""
    call, db = thread
    await call(_autocheckpoint_off, db)


class WalCheckpointer:
    """Runs PASSIVE WAL checkpoints of an SQLite store as commits add to the log."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._since = 0  # events committed since the last checkpoint
        self._wake = asyncio.Event()
        self._stopping = False
        self.checkpoints = 0

    def committed(self, events: int) -> None:
        """Count a commit of ``events`` events (the writer calls this after each commit)."""
        self._since += events
        if self._since >= CHECKPOINT_EVENTS:
            self._wake.set()

    def stop(self) -> None:
        """End ``run`` (after the checkpoint under way, if any)."""
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        """Checkpoint as commits come, until ``stop``."""
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), CHECKPOINT_INTERVAL_S)
            self._wake.clear()
            if self._stopping or not self._since:
                continue  # stopping: closing the last connection checkpoints what is left
            self._since = 0
            try:
                await self.checkpoint()
            except Exception:
                # The log only grows until the next one: nothing committed is at risk.
                log.exception("a WAL checkpoint failed; the next one is in %.0f s",
                              CHECKPOINT_INTERVAL_S)

    async def checkpoint(self) -> None:
        """One PASSIVE checkpoint: what no reader still needs is copied back, now."""
        async with self._engine.connect() as conn:
            await conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
        self.checkpoints += 1


__all__ = ["CHECKPOINT_EVENTS", "CHECKPOINT_INTERVAL_S", "WalCheckpointer",
           "disable_autocheckpoint"]
