"""The ``simulator_journal`` table: every operation a simulator run accepted, in order.

The one module that holds this table's SQL. An entry is a row per (run, seq): the command's
name and JSON arguments and the simulated time it applied at; ``simulator/hosting/journal.py``
gives them their meaning. Writing an entry twice (a retry after a commit whose answer was
lost) is not an error when the row written is the same.

An append by an owner is fenced by its lease (``run_fence``), in the same statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, delete, insert, literal, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from .dbclock import db_epoch
from .run_fence import RunFence
from .tables import simulator_journal as journal


@dataclass(frozen=True, slots=True)
class JournalRow:
    """One entry as stored: the ``seq``-th of its run, ``command`` with ``args_json``."""

    seq: int
    sim_t: float
    command: str
    args_json: str


class JournalRows:
    """Appends, reads and drops runs' journal rows."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def append(self, simulation_id: int, run_id: str, row: JournalRow, *,
                     owner: str | None = None) -> None:
        """Write ``row``; committed when this returns. The same row again is a no-op, a
        different one with the same seq an ``IntegrityError``. With ``owner``, only while
        that node holds the run's live lease (else ``LeaseLost``, nothing written)."""
        fence = None if owner is None else RunFence(simulation_id, owner)
        values = {"run_id": run_id, "seq": row.seq, "simulation_id": simulation_id,
                  "sim_t": row.sim_t, "command": row.command, "args_json": row.args_json}
        try:
            async with self._engine.begin() as conn:
                if fence is None:
                    await conn.execute(insert(journal).values(**values,
                                                              created_at=db_epoch()))
                    return
                written = await conn.execute(insert(journal).from_select(
                    [*values, "created_at"], _fenced(values, fence)))
            if written.rowcount == 1:
                return
        except IntegrityError:
            if not await self._stored(run_id, row):
                raise
            return
        # Refused by the fence; unless this is a retry after a commit whose answer was lost.
        if not await self._stored(run_id, row):
            assert fence is not None  # an unfenced append returned above
            raise fence.refused(f"its journal entry {row.seq} was")

    async def _stored(self, run_id: str, row: JournalRow) -> bool:
        """Whether ``row`` is stored exactly as it is."""
        async with self._engine.connect() as conn:
            stored = (await conn.execute(
                select(journal.c.sim_t, journal.c.command, journal.c.args_json)
                .where(journal.c.run_id == run_id, journal.c.seq == row.seq))).first()
        return stored is not None and tuple(stored) == (row.sim_t, row.command, row.args_json)

    async def page(self, run_id: str, *, after_seq: int, limit: int) -> list[JournalRow]:
        """Up to ``limit`` of the run's rows after ``after_seq``, in order."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(
                select(journal.c.seq, journal.c.sim_t, journal.c.command, journal.c.args_json)
                .where(journal.c.run_id == run_id, journal.c.seq > after_seq)
                .order_by(journal.c.seq).limit(limit))).all()
        return [JournalRow(int(seq), float(sim_t), str(name), str(args))
                for seq, sim_t, name, args in rows]

    async def forget(self, simulation_id: int, keep_run: str | None = None) -> None:
        """Drop the journals of the simulation's runs (all, or all but ``keep_run``)."""
        where = [journal.c.simulation_id == simulation_id]
        if keep_run is not None:
            where.append(journal.c.run_id != keep_run)
        async with self._engine.begin() as conn:
            await conn.execute(delete(journal).where(*where))


def _fenced(values: dict[str, object], fence: RunFence) -> Select[Any]:
    """The row's values, selected only from the run's lease row that ``fence`` holds."""
    return (select(*(literal(value, journal.c[name].type) for name, value in values.items()),
                   db_epoch())
            .where(*fence.holds())
            .with_for_update(read=True))
