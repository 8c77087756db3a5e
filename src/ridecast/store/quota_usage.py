"""What the store says an organisation uses: runs and their vehicles, simulations,
templates and stored event bytes (read by ``limits/quota_service.py``).

The store is the truth of the quotas counted in it, so nothing is lost on a restart and
every node reads the same: a run holds a slot while its row is running or paused and its
lease holds, or it can be taken over (it has a spec); a run that finished, stopped, or
whose node died with no way to take it over, holds none.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from .tables import events, simulation_templates, simulations, simulator_runs

# The statuses of a run that needs an owner (simulator/hosting/lease.py's ACTIVE; the store
# does not import the simulator).
_ACTIVE = ("running", "paused")


def _vehicles(status_json: Any, spec_json: Any) -> int:
    """A run's fleet size: from its status snapshot, else the settings in its spec."""
    for source in (status_json, (spec_json or {}).get("data")):
        if isinstance(source, dict):
            settings = source.get("settings") or source.get("simulator")
            if isinstance(settings, dict) and isinstance(settings.get("vehicles"), int):
                return int(settings["vehicles"])
    return 0


class QuotaUsageStore:
    """Counts per organisation, read from the store."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    def _active_runs(self) -> Any:
        runs = simulator_runs
        return (select(simulations.c.org_id, runs.c.simulation_id, runs.c.status_json,
                       runs.c.spec_json)
                .select_from(runs.join(simulations, simulations.c.id == runs.c.simulation_id))
                .where(runs.c.status.in_(_ACTIVE),
                       or_(runs.c.lease_until > time.time(), runs.c.run_id.is_not(None))))

    async def runs_of(self, org_id: int, *, besides: int | None = None) -> tuple[int, int]:
        """The organisation's runs holding a slot and their vehicles (not counting the
        simulation ``besides``, whose own start is being decided)."""
        query = self._active_runs().where(simulations.c.org_id == org_id)
        if besides is not None:
            query = query.where(simulator_runs.c.simulation_id != besides)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return len(rows), sum(_vehicles(row.status_json, row.spec_json) for row in rows)

    async def runs_by_org(self) -> tuple[dict[int, int], dict[int, int]]:
        """Runs and vehicles of every organisation that has a run holding a slot."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(self._active_runs())).all()
        runs: Counter[int] = Counter()
        vehicles: Counter[int] = Counter()
        for row in rows:
            runs[row.org_id] += 1
            vehicles[row.org_id] += _vehicles(row.status_json, row.spec_json)
        return dict(runs), dict(vehicles)

    async def count_of(self, kind: str, org_id: int) -> int:
        """The organisation's simulations or templates (``kind``), deleted ones not counted."""
        table = simulations if kind == "simulations" else simulation_templates
        async with self._engine.connect() as conn:
            found = await conn.scalar(select(func.count()).select_from(table).where(
                table.c.org_id == org_id, table.c.deleted_at.is_(None)))
        return int(found or 0)

    async def counts_by_org(self, kind: str) -> dict[int, int]:
        """Simulations or templates (``kind``) of every organisation that has some."""
        table = simulations if kind == "simulations" else simulation_templates
        async with self._engine.connect() as conn:
            rows = (await conn.execute(
                select(table.c.org_id, func.count()).where(table.c.deleted_at.is_(None))
                .group_by(table.c.org_id))).all()
        return {int(org): int(count) for org, count in rows}

    async def event_bytes_by_org(self) -> dict[int, int]:
        """Bytes of the stored event bodies of every organisation's simulations (a scan of
        the event log: run every ``RIDECAST_QUOTA_RECOUNT_S``, not per request)."""
        async with self._engine.connect() as conn:
            rows = (await conn.execute(
                select(simulations.c.org_id, func.sum(func.length(events.c.body)))
                .select_from(events.join(simulations,
                                         simulations.c.id == events.c.simulation_id))
                .group_by(simulations.c.org_id))).all()
        return {int(org): int(total or 0) for org, total in rows}
