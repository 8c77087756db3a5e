"""Simulations and simulation templates in the store."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from ..auth.visibility import Principal
from .tables import simulation_templates, simulations


@dataclass(frozen=True, slots=True)
class SimulationRecord:
    """One simulation row."""

    id: int
    name: str
    data: dict[str, Any]
    template_id: int | None
    owner_id: int
    org_id: int
    version: int
    created_at: float
    updated_at: float
    webhook_disabled_at: float | None = None
    webhook_disabled_reason: str | None = None

    @property
    def etag(self) -> str:
        return f'"{self.id}-{self.version}"'


@dataclass(frozen=True, slots=True)
class TemplateRecord:
    """One simulation template row."""

    id: int
    name: str
    data: dict[str, Any]
    owner_id: int
    org_id: int
    created_at: float


_SIM_COLUMNS = (
    simulations.c.id,
    simulations.c.name,
    simulations.c.data,
    simulations.c.template_id,
    simulations.c.owner_id,
    simulations.c.org_id,
    simulations.c.version,
    simulations.c.created_at,
    simulations.c.updated_at,
    simulations.c.webhook_disabled_at,
    simulations.c.webhook_disabled_reason,
)
_TPL_COLUMNS = (
    simulation_templates.c.id,
    simulation_templates.c.name,
    simulation_templates.c.data,
    simulation_templates.c.owner_id,
    simulation_templates.c.org_id,
    simulation_templates.c.created_at,
)


def _visible_clause(principal: Principal, org_col: Any, owner_col: Any) -> Any:
    if principal.is_admin:
        return True
    return or_(org_col == principal.org_id, owner_col == principal.user_id)


class SimulationStore:
    """CRUD of simulations and templates; deleting is soft, so delivery logs keep their target."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(
        self, owner: Principal, name: str, data: dict[str, Any], template_id: int | None
    ) -> SimulationRecord:
        now = time.time()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                insert(simulations)
                .values(
                    name=name,
                    data=data,
                    template_id=template_id,
                    owner_id=owner.user_id,
                    org_id=owner.org_id,
                    version=1,
                    created_at=now,
                    updated_at=now,
                )
                .returning(*_SIM_COLUMNS)
            )
            return SimulationRecord(*result.one())

    async def get(self, simulation_id: int) -> SimulationRecord | None:
        """The simulation, or None when it does not exist or was deleted."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(*_SIM_COLUMNS).where(
                        simulations.c.id == simulation_id, simulations.c.deleted_at.is_(None)
                    )
                )
            ).first()
        return SimulationRecord(*row) if row else None

    async def list_visible(
        self, principal: Principal, *, limit: int, offset: int
    ) -> tuple[list[SimulationRecord], int]:
        clause = _visible_clause(principal, simulations.c.org_id, simulations.c.owner_id)
        base = select(*_SIM_COLUMNS).where(simulations.c.deleted_at.is_(None), clause)
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(base.order_by(simulations.c.id).limit(limit).offset(offset))
            ).all()
            total = await conn.scalar(
                select(func.count())
                .select_from(simulations)
                .where(simulations.c.deleted_at.is_(None), clause)
            )
        return [SimulationRecord(*row) for row in rows], int(total or 0)

    async def list_active(self) -> list[SimulationRecord]:
        """Every simulation not deleted (for start-up work such as resuming simulators)."""
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(*_SIM_COLUMNS)
                    .where(simulations.c.deleted_at.is_(None))
                    .order_by(simulations.c.id)
                )
            ).all()
        return [SimulationRecord(*row) for row in rows]

    async def update(
        self,
        simulation_id: int,
        *,
        expected_version: int | None,
        name: str | None = None,
        data: dict[str, Any] | None = None,
        webhook_disabled_at: float | None = None,
        webhook_disabled_reason: str | None = None,
        clear_webhook_disabled: bool = False,
    ) -> SimulationRecord | None:
        """Apply a change atomically; None when the simulation is gone or the version moved on.

        The version check is in the UPDATE's WHERE clause, so two concurrent writers can
        never both win (the If-Match guarantee).
        """
        values: dict[str, Any] = {
            "version": simulations.c.version + 1,
            "updated_at": time.time(),
        }
        if name is not None:
            values["name"] = name
        if data is not None:
            values["data"] = data
        if webhook_disabled_at is not None:
            values["webhook_disabled_at"] = webhook_disabled_at
            values["webhook_disabled_reason"] = webhook_disabled_reason
        elif clear_webhook_disabled:
            values["webhook_disabled_at"] = None
            values["webhook_disabled_reason"] = None
        conds = [simulations.c.id == simulation_id, simulations.c.deleted_at.is_(None)]
        if expected_version is not None:
            conds.append(simulations.c.version == expected_version)
        async with self._engine.begin() as conn:
            row = (
                await conn.execute(
                    update(simulations).where(*conds).values(**values).returning(*_SIM_COLUMNS)
                )
            ).first()
        return SimulationRecord(*row) if row else None

    async def delete(self, simulation_id: int) -> bool:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(simulations)
                .where(simulations.c.id == simulation_id, simulations.c.deleted_at.is_(None))
                .values(deleted_at=time.time())
            )
        return bool(result.rowcount)

    # ---- templates ---------------------------------------------------------------------

    async def create_template(
        self, owner: Principal, name: str, data: dict[str, Any]
    ) -> TemplateRecord:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                insert(simulation_templates)
                .values(
                    name=name,
                    data=data,
                    owner_id=owner.user_id,
                    org_id=owner.org_id,
                    created_at=time.time(),
                )
                .returning(*_TPL_COLUMNS)
            )
            return TemplateRecord(*result.one())

    async def get_template(self, template_id: int) -> TemplateRecord | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(*_TPL_COLUMNS).where(simulation_templates.c.id == template_id)
                )
            ).first()
        return TemplateRecord(*row) if row else None

    async def list_templates(self, principal: Principal) -> list[TemplateRecord]:
        clause = _visible_clause(
            principal, simulation_templates.c.org_id, simulation_templates.c.owner_id
        )
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(*_TPL_COLUMNS).where(clause).order_by(simulation_templates.c.id)
                )
            ).all()
        return [TemplateRecord(*row) for row in rows]
