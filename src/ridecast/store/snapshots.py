"""Simulator snapshots in ``simulator_snapshots``: the one module that holds their SQL.

A row is one run's engine state at simulated time ``sim_t`` (bytes from
``simulator/core/snapshot.py``) with what a takeover needs to go on from it: the journal
entries already applied (``journal_seq``) and the run's events committed by then
(``event_count``, the last one's event log id). Only the newest ``keep`` rows of a run are
kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from .tables import simulator_snapshots as snapshots


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """A run's engine at ``sim_t``: journal entries up to ``journal_seq`` applied, its first
    ``event_count`` events committed (the last with id ``last_event_id``)."""

    run_id: str
    simulation_id: int
    sim_t: float
    format_version: int
    journal_seq: int
    event_count: int
    last_event_id: int | None
    body: bytes


class SnapshotStore:
    """Writes, reads and prunes runs' snapshots."""

    def __init__(self, engine: AsyncEngine, *, keep: int = 2,
                 clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self.keep = keep
        self._clock = clock

    async def save(self, snap: StoredSnapshot) -> None:
        """Store ``snap`` and delete the run's snapshots older than the newest ``keep``."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(snapshots).where(
                snapshots.c.run_id == snap.run_id, snapshots.c.sim_t == snap.sim_t))
            await conn.execute(insert(snapshots).values(
                run_id=snap.run_id, simulation_id=snap.simulation_id, sim_t=snap.sim_t,
                format_version=snap.format_version, journal_seq=snap.journal_seq,
                event_count=snap.event_count, last_event_id=snap.last_event_id,
                body=snap.body, created_at=self._clock()))
            oldest_kept = (await conn.execute(
                select(snapshots.c.sim_t).where(snapshots.c.run_id == snap.run_id)
                .order_by(snapshots.c.sim_t.desc()).offset(self.keep - 1).limit(1)
            )).scalar()
            if oldest_kept is not None:
                await conn.execute(delete(snapshots).where(
                    snapshots.c.run_id == snap.run_id, snapshots.c.sim_t < oldest_kept))

    async def newest(self, run_id: str, *, before: float | None = None) -> StoredSnapshot | None:
        """The run's newest snapshot (strictly before simulated ``before`` when given)."""
        query = select(snapshots).where(snapshots.c.run_id == run_id)
        if before is not None:
            query = query.where(snapshots.c.sim_t < before)
        async with self._engine.connect() as conn:
            row = (await conn.execute(
                query.order_by(snapshots.c.sim_t.desc()).limit(1))).first()
        if row is None:
            return None
        return StoredSnapshot(
            str(row.run_id), int(row.simulation_id), float(row.sim_t),
            int(row.format_version), int(row.journal_seq), int(row.event_count),
            None if row.last_event_id is None else int(row.last_event_id), bytes(row.body))

    async def count(self, run_id: str) -> int:
        """How many snapshots of the run are stored."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(
                select(snapshots.c.sim_t).where(snapshots.c.run_id == run_id))).all()
        return len(rows)

    async def forget(self, simulation_id: int, keep_run: str | None = None) -> None:
        """Drop the snapshots of the simulation's runs (all, or all but ``keep_run``)."""
        where = [snapshots.c.simulation_id == simulation_id]
        if keep_run is not None:
            where.append(snapshots.c.run_id != keep_run)
        async with self._engine.begin() as conn:
            await conn.execute(delete(snapshots).where(*where))
