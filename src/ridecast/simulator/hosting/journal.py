"""The journal of a run: every operation it accepted, in order, in ``simulator_journal``.

A run's events are a function of its seed, start and settings (the spec, kept in its
``simulator_runs`` row) and of this journal: each entry is an operation command and the
simulated time at which it applied. The owner writes an entry after the engine accepted the
operation and before the operation is answered or its events are published, so an operation
a client saw acknowledged is always in the journal; replaying the entries in order at their
times (``Runner``) gives the run again, on any node. A refused operation changes nothing
and is not written. The SQL is ``store/simulator_journal.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from ...store.simulator_journal import JournalRow, JournalRows
from ..core.commands import Command


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One accepted operation: the ``seq``-th of its run, applied at simulated ``sim_t``."""

    seq: int
    sim_t: float
    command: Command


class JournalStore:
    """Appends and reads runs' journals as operation commands."""

    def __init__(self, engine: AsyncEngine, *, owner: str | None = None) -> None:
        self._rows = JournalRows(engine)
        # The node whose runs' entries this writes: each only while its lease holds
        # (``store/simulator_journal.py``). None: unfenced, a process with no leases.
        self.owner = owner

    async def append(self, simulation_id: int, run_id: str, entry: JournalEntry) -> None:
        """Write ``entry``; committed when this returns (written again, the same entry is
        a no-op; another with its seq is an error; ``LeaseLost`` when the owner's lease on
        the run no longer holds)."""
        await self._rows.append(simulation_id, run_id, JournalRow(
            entry.seq, entry.sim_t, entry.command.name, entry.command.args_json()),
            owner=self.owner)

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
        return [JournalEntry(row.seq, row.sim_t, Command(row.command, json.loads(row.args_json)))
                for row in await self._rows.page(run_id, after_seq=after_seq, limit=limit)]

    async def forget(self, simulation_id: int, keep_run: str | None = None) -> None:
        """Drop the journals of the simulation's runs (all, or all but ``keep_run``)."""
        await self._rows.forget(simulation_id, keep_run)
