"""The journal of a run: every operation it accepted, in order, in ``simulator_journal``.

A run's events are a function of its seed, start and settings (the spec, kept in its
``simulator_runs`` row) and of this journal: each entry is an operation command and the
simulated time at which it applied. The owner writes an entry after the engine accepted the
operation and before the operation is answered or its events are published, so an operation
a client saw acknowledged is always in the journal; replaying the entries in order at their
times (``Runner``) gives the run again, on any node. A refused operation changes nothing
and is not written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ...store.tables import simulator_journal as journal
from ..core.commands import Command


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One accepted operation: the ``seq``-th of its run, applied at simulated ``sim_t``."""

    seq: int
    sim_t: float
    command: Command


class JournalStore:
    """Appends and reads runs' journals; the one module that holds their SQL."""

    def __init__(self, engine: AsyncEngine, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    async def append(self, simulation_id: int, run_id: str, entry: JournalEntry) -> None:
        """Write ``entry``; committed when this returns (a duplicate seq is an error)."""
        async with self._engine.begin() as conn:
            await conn.execute(insert(journal).values(
                run_id=run_id, seq=entry.seq, simulation_id=simulation_id,
                sim_t=entry.sim_t, command=entry.command.name,
                args_json=entry.command.args_json(), created_at=self._clock()))

    PAGE = 1000
    """Entries read per query."""

    async def read(self, run_id: str, *, after_seq: int = 0) -> list[JournalEntry]:
        """The run's entries after ``after_seq`` in order (a takeover from a snapshot reads
        only those after it), a page per query."""
        out: list[JournalEntry] = []
        while True:
            page = await self.page(run_id, after_seq=after_seq, limit=self.PAGE)
            out.extend(page)
            if len(page) < self.PAGE:
                return out
            after_seq = page[-1].seq

    async def page(self, run_id: str, *, after_seq: int, limit: int) -> list[JournalEntry]:
        """Up to ``limit`` of the run's entries after ``after_seq``, in order."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(
                select(journal.c.seq, journal.c.sim_t, journal.c.command, journal.c.args_json)
                .where(journal.c.run_id == run_id, journal.c.seq > after_seq)
                .order_by(journal.c.seq).limit(limit))).all()
        return [JournalEntry(int(seq), float(sim_t), Command(name, json.loads(args)))
                for seq, sim_t, name, args in rows]

    async def forget(self, simulation_id: int, keep_run: str | None = None) -> None:
        """Drop the journals of the simulation's runs (all, or all but ``keep_run``)."""
        where = [journal.c.simulation_id == simulation_id]
        if keep_run is not None:
            where.append(journal.c.run_id != keep_run)
        async with self._engine.begin() as conn:
            await conn.execute(delete(journal).where(*where))
