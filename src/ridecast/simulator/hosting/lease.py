"""Who runs which simulator: leases and status snapshots in the ``simulator_runs`` table.

A run (a started simulator) is owned by one node, the process whose ``owner_node`` id is in
its row, until ``lease_until``. The owner renews its leases and writes a status snapshot; any
other node reads the snapshot. Taking a run is one conditional UPDATE (or the first INSERT),
so two nodes can never both own it: the database, not a home-made protocol, decides.

The row also holds what rebuilds the run on another node: its spec (``spec.py``) and its
progress (how many of its events are published, and its simulated clock). A row whose
status is running or paused and whose lease has passed belongs to a node that stopped (it
handed the run over on SIGTERM, or died): any node takes it over (``take_over``) and the run
goes on. A run without a spec (started before the journal existed) reads as
``interrupted`` instead, and can be started again. ``effective_status`` is that rule, pure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from ...store.tables import simulator_runs as runs
from .runner import Status

ACTIVE = (Status.RUNNING.value, Status.PAUSED.value)
"""Statuses that need a live owner; with an expired lease they read as ``interrupted``."""

IDLE_STATUS: dict[str, Any] = {"status": Status.IDLE.value, "sim_ts": None, "kpis": {}}
# What a run reads as between its start being claimed and the owner's first snapshot: taking
# the lease marks the run running at once, so that a second start elsewhere is refused.
CLAIMED_STATUS: dict[str, Any] = {"status": Status.RUNNING.value, "sim_ts": None, "kpis": {}}


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One ``simulator_runs`` row."""

    simulation_id: int
    owner_node: str
    lease_until: float
    status: str
    status_json: dict[str, Any]
    updated_at: float
    run_id: str | None = None
    spec_json: dict[str, Any] | None = None
    progress_json: dict[str, Any] | None = None

    def live(self, now: float) -> bool:
        """Whether the owner's lease still holds (so commands go to the owner)."""
        return self.lease_until > now

    @property
    def resumable(self) -> bool:
        """Whether another node can rebuild the run (it has a spec)."""
        return self.run_id is not None and self.spec_json is not None


def interrupted(snapshot: dict[str, Any], was: str, reason: str) -> dict[str, Any]:
    """The status of a run whose owner went away: its last snapshot, marked ``interrupted``."""
    return {**snapshot, "status": Status.INTERRUPTED.value, "interrupted_status": was,
            "error": reason}


TAKEOVER_PENDING = "pending"
"""``takeover`` of a run whose owner stopped, until a node has taken it."""
TAKEOVER_REPLAYING = "replaying"
"""``takeover`` of a run its new owner is rebuilding (replaying up to where it was)."""


def effective_status(record: RunRecord, now: float) -> dict[str, Any]:
    """What ``GET .../simulator`` answers on a node that does not own the run: the owner's
    snapshot with ``owner_node``; a run whose owner stopped is being taken over
    (``owner_node`` null, ``takeover`` pending), or, without a spec, ``interrupted``."""
    if record.status in ACTIVE and not record.live(now):
        if record.resumable:
            return {**record.status_json, "owner_node": None,
                    "takeover": TAKEOVER_PENDING}
        return interrupted(
            record.status_json, record.status,
            "the node running this simulator stopped renewing its lease; start it again",
        )
    if record.status in ACTIVE:
        return {**record.status_json, "owner_node": record.owner_node}
    return dict(record.status_json)


_COLUMNS = (runs.c.simulation_id, runs.c.owner_node, runs.c.lease_until, runs.c.status,
            runs.c.status_json, runs.c.updated_at, runs.c.run_id, runs.c.spec_json,
            runs.c.progress_json)


class LeaseStore:
    """Reads, takes, renews and releases run leases; every write is conditional on the owner."""

    def __init__(self, engine: AsyncEngine, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    def now(self) -> float:
        return self._clock()

    async def read(self, simulation_id: int) -> RunRecord | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(
                select(*_COLUMNS).where(runs.c.simulation_id == simulation_id))).first()
        return RunRecord(*row) if row else None

    async def acquire(self, simulation_id: int, node: str, lease_s: float) -> bool:
        """Own the run, marked running, unless another node holds a live lease on a running
        or paused one. The caller starts the simulator, then writes its status (or releases
        the lease with the previous status when the start fails)."""
        now = self.now()
        try:
            async with self._engine.begin() as conn:
                taken = await conn.execute(
                    update(runs)
                    .where(runs.c.simulation_id == simulation_id,
                           or_(runs.c.owner_node == node, runs.c.lease_until <= now,
                               runs.c.status.not_in(ACTIVE)))
                    .values(owner_node=node, lease_until=now + lease_s, updated_at=now,
                            status=Status.RUNNING.value, status_json=CLAIMED_STATUS,
                            run_id=None, spec_json=None, progress_json=None))
                if taken.rowcount == 1:
                    return True
                exists = await conn.scalar(
                    select(runs.c.simulation_id).where(runs.c.simulation_id == simulation_id))
                if exists is not None:
                    return False
                await conn.execute(insert(runs).values(
                    simulation_id=simulation_id, owner_node=node, lease_until=now + lease_s,
                    status=Status.RUNNING.value, status_json=CLAIMED_STATUS, updated_at=now))
        except IntegrityError:  # another node inserted the row first: it owns the run
            return False
        return True

    async def write(self, simulation_id: int, node: str, lease_s: float,
                    status: dict[str, Any], *, spec: dict[str, Any] | None = None,
                    progress: dict[str, Any] | None = None) -> bool:
        """Renew one lease and store its status snapshot (and the run's spec, its progress,
        when given); False when ``node`` lost it."""
        now = self.now()
        values: dict[str, Any] = {"lease_until": now + lease_s, "status": str(status["status"]),
                                  "status_json": status, "updated_at": now}
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
        now = self.now()
        async with self._engine.connect() as conn:
            rows = (await conn.execute(
                select(*_COLUMNS).where(runs.c.status.in_(ACTIVE), runs.c.lease_until <= now,
                                        runs.c.spec_json.is_not(None),
                                        runs.c.run_id.is_not(None))
                .order_by(runs.c.simulation_id))).all()
        return [RunRecord(*row) for row in rows]

    async def take_over(self, record: RunRecord, node: str, lease_s: float) -> bool:
        """Own ``record``'s run, still the same run and still unowned; one node wins."""
        now = self.now()
        async with self._engine.begin() as conn:
            taken = await conn.execute(
                update(runs)
                .where(runs.c.simulation_id == record.simulation_id,
                       runs.c.run_id == record.run_id, runs.c.status.in_(ACTIVE),
                       runs.c.lease_until <= now)
                .values(owner_node=node, lease_until=now + lease_s, updated_at=now,
                        status_json={**record.status_json, "owner_node": node,
                                     "takeover": TAKEOVER_REPLAYING}))
        return bool(taken.rowcount == 1)

    async def hand_over(self, simulation_id: int, node: str, status: dict[str, Any],
                        progress: dict[str, Any]) -> bool:
        """End ``node``'s lease on a running or paused run now, leaving it to be taken
        over: its last status (marked pending takeover) and exact progress."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(runs).where(runs.c.simulation_id == simulation_id,
                                   runs.c.owner_node == node)
                .values(lease_until=0.0, updated_at=self.now(), status=str(status["status"]),
                        status_json={**status, "owner_node": None,
                                     "takeover": TAKEOVER_PENDING},
                        progress_json=progress))
        return bool(result.rowcount == 1)

    async def renew(self, node: str, simulation_ids: Collection[int],
                    lease_s: float) -> set[int]:
        """Extend every lease of ``node`` among ``simulation_ids``; the ids it still owns."""
        if not simulation_ids:
            return set()
        now = self.now()
        ids = list(simulation_ids)
        async with self._engine.begin() as conn:
            await conn.execute(
                update(runs)
                .where(runs.c.owner_node == node, runs.c.simulation_id.in_(ids))
                .values(lease_until=now + lease_s))
            owned = (await conn.execute(
                select(runs.c.simulation_id)
                .where(runs.c.owner_node == node, runs.c.simulation_id.in_(ids)))).scalars()
            return set(owned)

    async def release(self, simulation_id: int, node: str,
                      status: dict[str, Any] | None = None) -> None:
        """End ``node``'s lease now (with a final status, when given)."""
        values: dict[str, Any] = {"lease_until": 0.0, "updated_at": self.now()}
        if status is not None:
            values.update(status=str(status["status"]), status_json=status)
        async with self._engine.begin() as conn:
            await conn.execute(update(runs).where(runs.c.simulation_id == simulation_id,
                                                  runs.c.owner_node == node).values(**values))

    async def delete(self, simulation_id: int) -> None:
        """Forget the run (its simulation was deleted)."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(runs).where(runs.c.simulation_id == simulation_id))
