"""The simulation catalog: the per-process cache of what ingest needs on every event.

Owner, organisation and webhook settings of each simulation, by id; a simulation's entry is
dropped when the bus says it changed. The bus is not the only guarantee: entries expire after
``ttl_s`` (RIDECAST_SIMULATION_CACHE_TTL_S), and at most ``max_size`` entries are kept
(RIDECAST_SIMULATION_CACHE_SIZE, least recently used dropped first), so caching "does not
exist" for many ids cannot grow memory without bound.

Concurrent misses of one id share one store read, and an entry used in the second half of its
life is read again in the background (one read per id at a time): a simulation that receives
events steadily keeps a fresh entry, instead of every connection posting to it missing at
once when the entry expires and reading the store each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..bus import Bus, BusMessage, SimulationChanged
from ..events.webhook_settings import WebhookSettings, webhook_settings
from ..store.simulations import SimulationRecord, SimulationStore

log = logging.getLogger(__name__)


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


def _retrieved(task: asyncio.Task[SimulationMeta | None]) -> None:
    """A background read's outcome is in the cache; its error is only worth a debug line."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("background read of a simulation failed: %r", task.exception())


class SimulationCatalog:
    """Cache of ``SimulationMeta`` by id, emptied for a simulation when the bus says it changed."""

    def __init__(
        self,
        store: SimulationStore,
        bus: Bus,
        *,
        max_size: int = 10_000,
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_size <= 0 or ttl_s <= 0:
            raise ValueError("max_size and ttl_s must be > 0")
        self._store = store
        self._max_size = max_size
        self._ttl_s = ttl_s
        self._clock = clock
        # id -> (meta or None for "does not exist", expiry on the clock); LRU order.
        self._cache: OrderedDict[int, tuple[SimulationMeta | None, float]] = OrderedDict()
        # Bumped on every change notice: a read that raced with a change is not cached.
        self._generation = 0
        # Store reads running now, by id, with the generation they started in.
        self._reading: dict[int, tuple[asyncio.Task[SimulationMeta | None], int]] = {}
        self._unsubscribe = bus.subscribe(self._on_bus)

    def _on_bus(self, messages: Sequence[BusMessage]) -> None:
        for message in messages:
            if isinstance(message, SimulationChanged):
                self.forget(message.simulation_id)

    def forget(self, simulation_id: int) -> None:
        """Drop the entry of a simulation that changed: the next lookup reads the store."""
        self._cache.pop(simulation_id, None)
        self._generation += 1

    def cached(self, simulation_id: int) -> SimulationMeta | None:
        """The simulation's meta when a live cache entry holds it, else None (a miss, an
        expired entry or a cached "does not exist"): ``lookup`` without I/O. An entry in the
        second half of its life is read again in the background."""
        entry = self._cache.get(simulation_id)
        if entry is None or entry[0] is None:
            return None
        left = entry[1] - self._clock()
        if left <= 0:
            return None
        self._cache.move_to_end(simulation_id)
        if left <= self._ttl_s / 2 and simulation_id not in self._reading:
            # Outside an event loop (RuntimeError) the entry just ages out.
            with contextlib.suppress(RuntimeError):
                self._read(simulation_id).add_done_callback(_retrieved)
        return entry[0]

    async def get(self, simulation_id: int) -> SimulationMeta | None:
        """The simulation's meta, or None when it does not exist or was deleted."""
        return (await self.lookup(simulation_id))[0]

    async def lookup(self, simulation_id: int) -> tuple[SimulationMeta | None, bool]:
        """``get``, and whether the answer came from the cache (no store read)."""
        entry = self._cache.get(simulation_id)
        if entry is not None:
            if entry[1] > self._clock():
                self._cache.move_to_end(simulation_id)
                return entry[0], True
            del self._cache[simulation_id]
        reading = self._reading.get(simulation_id)
        # A read that started before a change notice may hold what changed: not joined.
        read = (reading[0] if reading is not None and reading[1] == self._generation
                else self._read(simulation_id))
        # Shielded: a caller that goes away does not cancel the read the others wait for.
        return await asyncio.shield(read), False

    def _read(self, simulation_id: int) -> asyncio.Task[SimulationMeta | None]:
        """Start a store read of the simulation; it fills the cache unless a change notice
        came meanwhile (raises RuntimeError outside an event loop)."""
        generation = self._generation

        async def read() -> SimulationMeta | None:
            record = await self._store.get(simulation_id)
            meta = _meta(record) if record else None
            if self._generation == generation:
                self._cache[simulation_id] = (meta, self._clock() + self._ttl_s)
                self._cache.move_to_end(simulation_id)
                while len(self._cache) > self._max_size:
                    self._cache.popitem(last=False)
            return meta

        task = asyncio.get_running_loop().create_task(read())
        self._reading[simulation_id] = (task, generation)

        def done(_task: asyncio.Task[SimulationMeta | None]) -> None:
            if self._reading.get(simulation_id, (None, 0))[0] is task:
                del self._reading[simulation_id]

        task.add_done_callback(done)
        return task

    async def cancel_reads(self) -> None:
        """Cancel the store reads still running, and wait for them (before the engine that
        they read closes)."""
        tasks = [task for task, _generation in self._reading.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __len__(self) -> int:
        """Entries held now (at most ``max_size``)."""
        return len(self._cache)

    def close(self) -> None:
        self._unsubscribe()


__all__ = ["SimulationCatalog", "SimulationMeta"]
