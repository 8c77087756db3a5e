"""Simulations and simulation templates in the store."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast, func, insert, or_, select, update
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
    version: int = 1
    updated_at: float | None = None

    @property
    def etag(self) -> str:
        return f'"t{self.id}-{self.version}"'


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
    simulation_templates.c.version,
    simulation_templates.c.updated_at,
)
_LIVE_TEMPLATE = simulation_templates.c.deleted_at.is_(None)


def _page_ids(rows: list[Any], max_bytes: int) -> tuple[list[int], bool]:
    """The ids of ``rows`` (id, size) that fit in ``max_bytes`` (at least one), and whether
    the budget cut the list."""
    ids: list[int] = []
    used = 0
    for row_id, size in rows:
        used += int(size or 0) + ROW_OVERHEAD
        if ids and used > max_bytes:
            return ids, True
        ids.append(row_id)
    return ids, False


ROW_OVERHEAD = 400
"""Bytes a listed row adds to its name and data: ids, times, field names."""


def _size(table: Any) -> Any:
    """The stored size of a row's name and data, in characters: at least the data's bytes
    in a response, since the data is stored as ASCII JSON (a non-ASCII character as a
    six-character escape, for at most four bytes sent); a name (200 characters at most)
    can be up to 600 bytes more than counted, within ``ROW_OVERHEAD``."""
    return func.length(table.c.name) + func.length(cast(table.c.data, Text))


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
        self, principal: Principal, *, limit: int, offset: int, max_bytes: int = 2**62,
    ) -> tuple[list[SimulationRecord], int, bool]:
        """A page of the visible simulations, cut to ``max_bytes`` of stored name and data
        (at least one row), the count of all of them, and whether the budget cut the page.

        Ids and sizes are read first, so large rows are never loaded beyond the page."""
        clause = _visible_clause(principal, simulations.c.org_id, simulations.c.owner_id)
        live = simulations.c.deleted_at.is_(None)
        async with self._engine.connect() as conn:
            sized = (await conn.execute(
                select(simulations.c.id, _size(simulations)).where(live, clause)
                .order_by(simulations.c.id).limit(limit).offset(offset)
            )).all()
            ids, truncated = _page_ids(list(sized), max_bytes)
            rows = (await conn.execute(
                select(*_SIM_COLUMNS).where(simulations.c.id.in_(ids), live)
                .order_by(simulations.c.id)
            )).all() if ids else []
            total = await conn.scalar(
                select(func.count()).select_from(simulations).where(live, clause)
            )
        return [SimulationRecord(*row) for row in rows], int(total or 0), truncated

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
                    version=1,
                )
                .returning(*_TPL_COLUMNS)
            )
            return TemplateRecord(*result.one())

    async def get_template(self, template_id: int) -> TemplateRecord | None:
        """The template, or None when it does not exist or was deleted."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(*_TPL_COLUMNS).where(
                        simulation_templates.c.id == template_id, _LIVE_TEMPLATE)
                )
            ).first()
        return TemplateRecord(*row) if row else None

    async def list_templates(
        self, principal: Principal, *, limit: int = 2**31, offset: int = 0,
        max_bytes: int = 2**62,
    ) -> tuple[list[TemplateRecord], int, bool]:
        """A page of the visible templates, as ``list_visible`` pages simulations."""
        tpl = simulation_templates
        clause = _visible_clause(principal, tpl.c.org_id, tpl.c.owner_id)
        async with self._engine.connect() as conn:
            sized = (await conn.execute(
                select(tpl.c.id, _size(tpl)).where(_LIVE_TEMPLATE, clause)
                .order_by(tpl.c.id).limit(limit).offset(offset)
            )).all()
            ids, truncated = _page_ids(list(sized), max_bytes)
            rows = (await conn.execute(
                select(*_TPL_COLUMNS).where(tpl.c.id.in_(ids), _LIVE_TEMPLATE)
                .order_by(tpl.c.id)
            )).all() if ids else []
            total = await conn.scalar(
                select(func.count()).select_from(tpl).where(_LIVE_TEMPLATE, clause))
        return [TemplateRecord(*row) for row in rows], int(total or 0), truncated

    async def update_template(
        self, template_id: int, *, expected_version: int | None, name: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> TemplateRecord | None:
        """Apply a change atomically; None when the template is gone or the version moved
        on (the version check is in the UPDATE's WHERE clause, as for simulations)."""
        tpl = simulation_templates
        values: dict[str, Any] = {"version": tpl.c.version + 1, "updated_at": time.time()}
        if name is not None:
            values["name"] = name
        if data is not None:
            values["data"] = data
        conds = [tpl.c.id == template_id, _LIVE_TEMPLATE]
        if expected_version is not None:
            conds.append(tpl.c.version == expected_version)
        async with self._engine.begin() as conn:
            row = (await conn.execute(
                update(tpl).where(*conds).values(**values).returning(*_TPL_COLUMNS)
            )).first()
        return TemplateRecord(*row) if row else None

    async def delete_template(self, template_id: int) -> bool:
        """Delete softly: simulations made from it keep their ``template_id``."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(simulation_templates)
                .where(simulation_templates.c.id == template_id, _LIVE_TEMPLATE)
                .values(deleted_at=time.time())
            )
        return bool(result.rowcount)
