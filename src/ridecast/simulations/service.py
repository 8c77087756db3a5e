"""The simulation service: visibility, data validation, templates, and change notices.

The API calls it; it calls the store, and publishes a ``SimulationChanged`` on the bus after
every change so that every process (its own cache, the websocket hub, the webhook dispatcher)
sees the new settings for the next event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from ..auth.visibility import Principal, can_see
from ..bus import Bus, SimulationChanged
from ..errors import NotFound, PreconditionFailed, RidecastError, ServiceUnavailable
from ..events.webhook_settings import validate_simulation_data, webhook_settings
from ..store.simulations import SimulationRecord, SimulationStore, TemplateRecord
from .catalog import SimulationCatalog, SimulationMeta

DataCheck = Callable[[dict[str, Any]], Awaitable[None]]
"""An extra async check of simulation data (the webhook target's address, for one)."""

CreationGate = Callable[[str, int], AbstractAsyncContextManager[None]]
"""Held while one more of a kind (``simulations``, ``templates``) of an organisation is
created; refuses it when the organisation's quota is full (``limits/quota_service.py``)."""


class SimulationService:
    """Simulations and templates as a user sees them: visible ones only, validated data."""

    def __init__(self, store: SimulationStore, bus: Bus, catalog: SimulationCatalog) -> None:
        self.store = store
        self._bus = bus
        self._catalog = catalog
        self._data_checks: list[DataCheck] = []
        self.creation_gate: CreationGate | None = None

    def _creating(self, kind: str, org_id: int) -> AbstractAsyncContextManager[None]:
        if self.creation_gate is None:
            return nullcontext()
        return self.creation_gate(kind, org_id)

    def add_data_check(self, check: DataCheck) -> None:
        """Run ``check`` on every data a user sets (after the built-in validation)."""
        self._data_checks.append(check)

    async def _validate(self, data: Any) -> dict[str, Any]:
        checked = validate_simulation_data(data)
        for check in self._data_checks:
            await check(checked)
        return checked

    async def _changed(self, record: SimulationRecord, *, deleted: bool = False) -> None:
        try:
            await self._bus.publish(
                [SimulationChanged(record.id, record.org_id, record.owner_id, deleted=deleted)]
            )
        except ServiceUnavailable:
            # The change is committed: answering 503 would invite a second create. This
            # node forgets its cached copy now; the others re-read it when their entry
            # expires (RIDECAST_SIMULATION_CACHE_TTL_S). The bus has logged that it is down.
            self._catalog.forget(record.id)

    async def get(self, principal: Principal, simulation_id: int) -> SimulationRecord:
        """The simulation if ``principal`` can see it; otherwise 404, whether it exists or not."""
        record = await self.store.get(simulation_id)
        if record is None or not can_see(principal, org_id=record.org_id, owner_id=record.owner_id):
            raise NotFound(f"simulation {simulation_id} not found", code="simulation_not_found")
        return record

    async def visible_meta(self, principal: Principal, simulation_id: int) -> SimulationMeta:
        """Like ``get`` but from the per-process cache: for the hot paths (ingest, history)."""
        meta, cached = await self._catalog.lookup(simulation_id)
        if meta is None or not can_see(principal, org_id=meta.org_id, owner_id=meta.owner_id):
            if cached:
                # Every refusal costs exactly one store read, whether the id is another
                # organisation's (usually cached: it is busy) or does not exist (a cache
                # miss): the answer's timing must not tell the two apart.
                await self.store.get(simulation_id)
            raise NotFound(
                f"simulation {simulation_id} not found", code="simulation_not_found"
            )
        return meta

    def cached_visible_meta(self, principal: Principal,
                            simulation_id: int) -> SimulationMeta | None:
        """``visible_meta``'s answer when the cache holds the simulation and ``principal``
        may see it; None when only ``visible_meta`` can decide (no I/O here)."""
        meta = self._catalog.cached(simulation_id)
        if meta is None or not can_see(principal, org_id=meta.org_id, owner_id=meta.owner_id):
            return None
        return meta

    async def list_visible(
        self, principal: Principal, *, limit: int, offset: int, max_bytes: int = 2**62,
    ) -> tuple[list[SimulationRecord], int, bool]:
        """A page of the visible simulations, its byte budget applied (see the store)."""
        return await self.store.list_visible(principal, limit=limit, offset=offset,
                                             max_bytes=max_bytes)

    async def create(
        self, principal: Principal, name: str, data: Any, template_id: int | None
    ) -> SimulationRecord:
        if template_id is not None:
            template = await self.get_template(principal, template_id)
            # The template's data is the base; keys sent with the request override it.
            merged = dict(template.data)
            if data is not None:
                if not isinstance(data, dict):
                    validate_simulation_data(data)
                merged.update(data)
            data = merged
        checked = await self._validate({} if data is None else data)
        async with self._creating("simulations", principal.org_id):
            record = await self.store.create(principal, name, checked, template_id)
        await self._changed(record)
        return record

    async def update(
        self,
        principal: Principal,
        simulation_id: int,
        *,
        if_match: str | None,
        name: str | None,
        data: Any,
        data_given: bool,
    ) -> SimulationRecord:
        """PATCH: ``data``, when given, replaces the whole object (interface rule 1)."""
        current = await self.get(principal, simulation_id)
        # A bad body is a 400 whatever the If-Match: the request could never succeed.
        new_data = await self._validate(data) if data_given else None
        expected = None
        if if_match is not None:
            if if_match.strip() != "*" and current.etag not in _etags(if_match):
                raise PreconditionFailed(
                    f"simulation {simulation_id} changed since you read it "
                    f"(current ETag {current.etag})",
                    details=[{"etag": current.etag}],
                )
            expected = current.version
        # A PATCH of the webhook settings re-enables an endpoint that was disabled.
        reenable = (
            new_data is not None
            and current.webhook_disabled_at is not None
            and webhook_settings(new_data) is not None
        )
        record = await self.store.update(
            simulation_id,
            expected_version=expected,
            name=name,
            data=new_data,
            clear_webhook_disabled=reenable,
        )
        if record is None:
            raise PreconditionFailed(
                f"simulation {simulation_id} changed while it was being updated; read it again"
            )
        await self._changed(record)
        return record

    async def delete(self, principal: Principal, simulation_id: int) -> None:
        record = await self.get(principal, simulation_id)
        await self.store.delete(simulation_id)
        await self._changed(record, deleted=True)

    async def disable_webhook(self, simulation_id: int, at: float, reason: str) -> None:
        """Mark the simulation's webhook endpoint disabled (the dispatcher's decision)."""
        record = await self.store.update(
            simulation_id,
            expected_version=None,
            webhook_disabled_at=at,
            webhook_disabled_reason=reason,
        )
        if record is not None:
            await self._changed(record)

    # ---- templates ---------------------------------------------------------------------

    async def create_template(self, principal: Principal, name: str, data: Any) -> TemplateRecord:
        checked = await self._validate({} if data is None else data)
        async with self._creating("templates", principal.org_id):
            return await self.store.create_template(principal, name, checked)

    async def get_template(self, principal: Principal, template_id: int) -> TemplateRecord:
        record = await self.store.get_template(template_id)
        if record is None or not can_see(principal, org_id=record.org_id, owner_id=record.owner_id):
            raise NotFound(f"template {template_id} not found", code="template_not_found")
        return record

    async def list_templates(
        self, principal: Principal, *, limit: int, offset: int, max_bytes: int = 2**62,
    ) -> tuple[list[TemplateRecord], int, bool]:
        """A page of the visible templates, its byte budget applied (see the store)."""
        return await self.store.list_templates(principal, limit=limit, offset=offset,
                                               max_bytes=max_bytes)

    async def _own_template(self, principal: Principal, template_id: int) -> TemplateRecord:
        """The template if ``principal`` may change it: its owner or an admin. Others who
        can see it get 403 not_owner; those who cannot, 404 as for reading."""
        record = await self.get_template(principal, template_id)
        if not principal.is_admin and record.owner_id != principal.user_id:
            raise RidecastError(
                f"template {template_id} belongs to another user; only its owner or an "
                "admin may change or delete it", code="not_owner",
            )
        return record

    async def update_template(
        self, principal: Principal, template_id: int, *, if_match: str | None,
        name: str | None, data: Any, data_given: bool,
    ) -> TemplateRecord:
        """PATCH, as for a simulation: ``data`` when given replaces the whole object, and
        ``If-Match`` guards against a lost update (412)."""
        current = await self._own_template(principal, template_id)
        # A bad body is a 400 whatever the If-Match: the request could never succeed.
        new_data = await self._validate(data) if data_given else None
        expected = None
        if if_match is not None:
            if if_match.strip() != "*" and current.etag not in _etags(if_match):
                raise PreconditionFailed(
                    f"template {template_id} changed since you read it "
                    f"(current ETag {current.etag})",
                    details=[{"etag": current.etag}],
                )
            expected = current.version
        record = await self.store.update_template(
            template_id, expected_version=expected, name=name, data=new_data)
        if record is None:
            raise PreconditionFailed(
                f"template {template_id} changed while it was being updated; read it again")
        return record

    async def delete_template(self, principal: Principal, template_id: int) -> None:
        """Delete a template; simulations made from it keep their data and template_id."""
        await self._own_template(principal, template_id)
        await self.store.delete_template(template_id)


def _etags(header: str) -> set[str]:
    tags = {tag.strip() for tag in header.split(",") if tag.strip()}
    # Accept a weak form of our tag too: W/"..." names the same version here.
    return tags | {tag[2:] for tag in tags if tag.startswith("W/")}


__all__ = ["DataCheck", "SimulationService"]
