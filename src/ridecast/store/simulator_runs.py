"""The ``simulator_runs`` table: who runs which simulator, until when, and its snapshot.

The one module that holds this table's SQL. A run is owned by the node whose id is in its
row until ``lease_until``; taking a run is one conditional UPDATE (or the first INSERT), so
two nodes can never both own it. Every lease is dated and compared by the database's clock
(``dbclock.py``), inside the statement: a node's own clock never decides whether a lease is
live. The simulator's hosting (``simulator/hosting/lease.py``) gives the rows their meaning.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from .dbclock import db_epoch
from .tables import simulator_runs as runs

ACTIVE = ("running", "paused")
"""Statuses of a run that needs a live owner."""
TAKEOVER_PENDING = "pending"
"""``takeover`` of a run whose owner stopped, until a node has taken it."""
TAKEOVER_REPLAYING = "replaying"
"""``takeover`` of a run its new owner is rebuilding (replaying up to where it was)."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One ``simulator_runs`` row, read at ``read_at`` by the database's clock."""

    simulation_id: int
    owner_node: str
    lease_until: float
    status: str
    status_json: dict[str, Any]
    updated_at: float
    run_id: str | None = None
    spec_json: dict[str, Any] | None = None
    progress_json: dict[str, Any] | None = None
    read_at: float = 0.0

    def live(self, now: float | None = None) -> bool:
        """Whether the owner's lease held when the row was read (or at ``now``, a time
        of the database's clock)."""
        return self.lease_until > (self.read_at if now is None else now)

    @property
    def resumable(self) -> bool:
        """Whether another node can rebuild the run (it has a spec)."""
        return self.run_id is not None and self.spec_json is not None


_COLUMNS = (runs.c.simulation_id, runs.c.owner_node, runs.c.lease_until, runs.c.status,
            runs.c.status_json, runs.c.updated_at, runs.c.run_id, runs.c.spec_json,
            runs.c.progress_json, db_epoch())


class LeaseStore:
    """Reads, takes, renews and releases run leases; every write is conditional on the
    owner, every time is the database's.

    ``now()`` is this node's reading of the database's clock (its own clock plus the offset
    seen at the last read), for what is not a lease: a run's simulated clock pinned to the
    wall clock, a ``Retry-After``. ``clock`` is injectable for tests.
    """

    def __init__(self, engine: AsyncEngine, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock
        self._offset = 0.0

    def now(self) -> float:
        return self._clock() + self._offset

    def _seen(self, sent_at: float, db_now: float) -> None:
        # The database read its clock between sending and answering: take the midpoint.
        self._offset = float(db_now) - (sent_at + self._clock()) / 2

    def _record(self, row: Any) -> RunRecord:
        (simulation_id, owner_node, lease_until, status, status_json, updated_at, run_id,
         spec_json, progress_json, read_at) = row
        return RunRecord(simulation_id, owner_node, lease_until, status, status_json,
                         updated_at, run_id, spec_json, progress_json, float(read_at))

    async def read(self, simulation_id: int) -> RunRecord | None:
        sent_at = self._clock()
        async with self._engine.connect() as conn:
            row = (await conn.execute(
                select(*_COLUMNS).where(runs.c.simulation_id == simulation_id))).first()
            if row is None:
                self._seen(sent_at, float(await conn.scalar(select(db_epoch())) or 0.0))
                return None
        self._seen(sent_at, row[-1])
        return self._record(row)

    async def acquire(self, simulation_id: int, node: str, lease_s: float,
                      status: dict[str, Any]) -> bool:
        """Own the run, marked with ``status``, unless another node holds a live lease on a
        running or paused one."""
        try:
            async with self._engine.begin() as conn:
                taken = await conn.execute(
                    update(runs)
                    .where(runs.c.simulation_id == simulation_id,
                           or_(runs.c.owner_node == node, runs.c.lease_until <= db_epoch(),
                               runs.c.status.not_in(ACTIVE)))
                    .values(owner_node=node, lease_until=db_epoch() + lease_s,
                            updated_at=db_epoch(), status=str(status["status"]),
                            status_json=status, run_id=None, spec_json=None,
                            progress_json=None))
                if taken.rowcount == 1:
                    return True
                exists = await conn.scalar(
                    select(runs.c.simulation_id).where(runs.c.simulation_id == simulation_id))
                if exists is not None:
                    return False
                await conn.execute(insert(runs).values(
                    simulation_id=simulation_id, owner_node=node,
                    lease_until=db_epoch() + lease_s, status=str(status["status"]),
                    status_json=status, updated_at=db_epoch()))
        except IntegrityError:  # another node inserted the row first: it owns the run
            return False
        return True

    async def write(self, simulation_id: int, node: str, lease_s: float,
                    status: dict[str, Any], *, spec: dict[str, Any] | None = None,
                    progress: dict[str, Any] | None = None) -> bool:
        """Renew one lease and store its status snapshot (and the run's spec, its progress,
        when given); False when ``node`` lost it."""
        values: dict[str, Any] = {"lease_until": db_epoch() + lease_s,
                                  "status": str(status["status"]), "status_json": status,
                                  "updated_at": db_epoch()}
        if spec is not None:
            values.update(run_id=str(spec["run_id"]), spec_json=spec)
        if progress is not None:
            values["progress_json"] = progress
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(runs)
                .where(runs.c.simulation_id == simulation_id, runs.c.owner_node == node)
                .values(**values))
        return bool(result.rowcount == 1)

    async def orphans(self) -> list[RunRecord]:
        """Running or paused runs with a spec whose owner's lease has passed."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(
                select(*_COLUMNS).where(runs.c.status.in_(ACTIVE),
                                        runs.c.lease_until <= db_epoch(),
                                        runs.c.spec_json.is_not(None),
                                        runs.c.run_id.is_not(None))
                .order_by(runs.c.simulation_id))).all()
        return [self._record(row) for row in rows]

    async def take_over(self, record: RunRecord, node: str, lease_s: float,
                        status: dict[str, Any]) -> bool:
        """Own ``record``'s run, still the same run and still unowned, with ``status``;
        one node wins."""
        async with self._engine.begin() as conn:
            taken = await conn.execute(
                update(runs)
                .where(runs.c.simulation_id == record.simulation_id,
                       runs.c.run_id == record.run_id, runs.c.status.in_(ACTIVE),
                       runs.c.lease_until <= db_epoch())
                .values(owner_node=node, lease_until=db_epoch() + lease_s,
                        updated_at=db_epoch(), status_json=status))
        return bool(taken.rowcount == 1)

    async def hand_over(self, simulation_id: int, node: str, status: dict[str, Any],
                        progress: dict[str, Any]) -> bool:
        """End ``node``'s lease on a run now, with its last status and exact progress."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(runs).where(runs.c.simulation_id == simulation_id,
                                   runs.c.owner_node == node)
                .values(lease_until=0.0, updated_at=db_epoch(),
                        status=str(status["status"]), status_json=status,
                        progress_json=progress))
        return bool(result.rowcount == 1)

    async def renew(self, node: str, simulation_ids: Collection[int],
                    lease_s: float) -> set[int]:
        """Extend every lease of ``node`` among ``simulation_ids``; the ids it still owns."""
        if not simulation_ids:
            return set()
        ids = list(simulation_ids)
        async with self._engine.begin() as conn:
            await conn.execute(
                update(runs)
                .where(runs.c.owner_node == node, runs.c.simulation_id.in_(ids))
                .values(lease_until=db_epoch() + lease_s))
            owned = (await conn.execute(
                select(runs.c.simulation_id)
                .where(runs.c.owner_node == node, runs.c.simulation_id.in_(ids)))).scalars()
            return set(owned)

    async def release(self, simulation_id: int, node: str,
                      status: dict[str, Any] | None = None) -> None:
        """End ``node``'s lease now (with a final status, when given)."""
        values: dict[str, Any] = {"lease_until": 0.0, "updated_at": db_epoch()}
        if status is not None:
            values.update(status=str(status["status"]), status_json=status)
        async with self._engine.begin() as conn:
            await conn.execute(update(runs).where(runs.c.simulation_id == simulation_id,
                                                  runs.c.owner_node == node).values(**values))

    async def delete(self, simulation_id: int) -> None:
        """Forget the run (its simulation was deleted)."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(runs).where(runs.c.simulation_id == simulation_id))
