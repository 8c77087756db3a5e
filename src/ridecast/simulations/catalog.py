"""The simulation catalog: the per-process cache of what ingest needs on every event.

Owner, organisation and webhook settings of each simulation, by id; a simulation's entry is
dropped when the bus says it changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..bus import Bus, BusMessage, SimulationChanged
from ..events.webhook_settings import WebhookSettings, webhook_settings
from ..store.simulations import SimulationRecord, SimulationStore


@dataclass(frozen=True, slots=True)
class SimulationMeta:
    """What every event of a simulation needs to know about it, cached per process."""

    id: int
    org_id: int
    owner_id: int
    webhook: WebhookSettings | None
    webhook_disabled: bool


def _meta(record: SimulationRecord) -> SimulationMeta:
    return SimulationMeta(
        id=record.id,
        org_id=record.org_id,
        owner_id=record.owner_id,
        webhook=webhook_settings(record.data),
        webhook_disabled=record.webhook_disabled_at is not None,
    )


class SimulationCatalog:
    """Cache of ``SimulationMeta`` by id, emptied for a simulation when the bus says it changed."""

    def __init__(self, store: SimulationStore, bus: Bus) -> None:
        self._store = store
        self._cache: dict[int, SimulationMeta | None] = {}
        # Bumped on every change notice: a read that raced with a change is not cached.
        self._generation: dict[int, int] = {}
        self._unsubscribe = bus.subscribe(self._on_bus)

    def _on_bus(self, messages: Sequence[BusMessage]) -> None:
        for message in messages:
            if isinstance(message, SimulationChanged):
                self._cache.pop(message.simulation_id, None)
                sim = message.simulation_id
                self._generation[sim] = self._generation.get(sim, 0) + 1

    async def get(self, simulation_id: int) -> SimulationMeta | None:
        """The simulation's meta, or None when it does not exist or was deleted."""
        if simulation_id in self._cache:
            return self._cache[simulation_id]
        generation = self._generation.get(simulation_id, 0)
        record = await self._store.get(simulation_id)
        meta = _meta(record) if record else None
        if self._generation.get(simulation_id, 0) == generation:
            self._cache[simulation_id] = meta
        return meta

    def close(self) -> None:
        self._unsubscribe()


__all__ = ["SimulationCatalog", "SimulationMeta"]
