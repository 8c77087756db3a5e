"""The simulation catalog is bounded (LRU) and expires entries (TTL) even without a bus notice;
concurrent misses share one store read, and a used entry is read again before it expires."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ridecast.bus import create_bus
from ridecast.bus.base import Bus
from ridecast.simulations import SimulationCatalog
from ridecast.store.accounts import AccountStore
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.simulations import SimulationRecord, SimulationStore
from tests.waiting import eventually_async


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[SimulationStore, AccountStore, Bus]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}"
    await upgrade(url)
    engine = create_engine(url)
    bus = create_bus("memory://")
    await bus.start()
    yield SimulationStore(engine), AccountStore(engine), bus
    await bus.close()
    await engine.dispose()


async def test_unknown_ids_do_not_grow_the_cache_beyond_its_size(
    parts: tuple[SimulationStore, AccountStore, Bus],
) -> None:
    store, _, bus = parts
    catalog = SimulationCatalog(store, bus, max_size=8, ttl_s=60.0)
    for simulation_id in range(1000, 1100):
        assert await catalog.get(simulation_id) is None
    assert len(catalog) == 8
    catalog.close()


async def test_an_entry_is_reread_after_the_ttl_without_any_bus_notice(
    parts: tuple[SimulationStore, AccountStore, Bus],
) -> None:
    store, accounts, bus = parts
    owner, _ = await accounts.create_user("ada", "acme")
    clock = _Clock()
    catalog = SimulationCatalog(store, bus, max_size=8, ttl_s=5.0, clock=clock)
    # Cache "does not exist" for the next id, then create it behind the catalog's back
    # (as another node would, with its notice lost).
    assert await catalog.get(1) is None
    record = await store.create(owner, "sim", {}, None)
    assert record.id == 1
    clock.now += 4.9
    assert await catalog.get(1) is None
    clock.now += 0.2
    meta = await catalog.get(1)
    assert meta is not None and meta.owner_id == owner.user_id
    catalog.close()


async def test_the_least_recently_used_entry_goes_first(
    parts: tuple[SimulationStore, AccountStore, Bus],
) -> None:
    store, accounts, bus = parts
    owner, _ = await accounts.create_user("ada", "acme")
    first = await store.create(owner, "first", {}, None)
    catalog = SimulationCatalog(store, bus, max_size=2, ttl_s=60.0)
    assert await catalog.get(first.id) is not None
    assert await catalog.get(9001) is None
    assert await catalog.get(first.id) is not None  # used again: 9001 is now the oldest
    assert await catalog.get(9002) is None  # evicts 9001, keeps first
    await store.delete(first.id)  # no notice published: the cached entry still answers
    assert await catalog.get(first.id) is not None
    catalog.close()


class _CountingStore(SimulationStore):
    """The real store, counting its reads of one simulation."""

    reads = 0

    async def get(self, simulation_id: int) -> SimulationRecord | None:
        self.reads += 1
        return await super().get(simulation_id)


async def test_concurrent_misses_share_one_store_read(
    parts: tuple[SimulationStore, AccountStore, Bus], tmp_path: Path,
) -> None:
    """32 connections posting to a simulation whose entry just expired read the store once."""
    store, accounts, bus = parts
    owner, _ = await accounts.create_user("ada", "acme")
    record = await store.create(owner, "sim", {}, None)
    counting = _CountingStore(store._engine)
    catalog = SimulationCatalog(counting, bus, max_size=8, ttl_s=5.0)
    metas = await asyncio.gather(*(catalog.get(record.id) for _ in range(32)))
    assert {meta.id if meta else None for meta in metas} == {record.id}
    assert counting.reads == 1
    catalog.close()


async def test_an_entry_in_the_second_half_of_its_life_is_read_again_in_the_background(
    parts: tuple[SimulationStore, AccountStore, Bus],
) -> None:
    store, accounts, bus = parts
    owner, _ = await accounts.create_user("ada", "acme")
    record = await store.create(owner, "sim", {}, None)
    clock = _Clock()
    catalog = SimulationCatalog(store, bus, max_size=8, ttl_s=5.0, clock=clock)
    assert await catalog.get(record.id) is not None
    await store.delete(record.id)  # behind the catalog's back: no notice
    clock.now += 2.0
    running = asyncio.all_tasks()
    assert catalog.cached(record.id) is not None  # young: no read
    assert asyncio.all_tasks() == running  # a read would be a task started by that call
    assert catalog.cached(record.id) is not None
    clock.now += 1.0  # past half its life: still answered, and read again meanwhile
    assert catalog.cached(record.id) is not None
    await eventually_async(lambda: catalog.cached(record.id) is None, timeout=5, step=0.005,
                           what="the cached entry dropped")
    assert await catalog.get(record.id) is None  # the read cached "does not exist"
    catalog.close()


class _HeldStore(SimulationStore):
    """The real store; its first read answers only once ``release`` is set."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read_done = asyncio.Event()
        self.release = asyncio.Event()

    async def get(self, simulation_id: int) -> SimulationRecord | None:
        record = await super().get(simulation_id)
        if not self.read_done.is_set():
            self.read_done.set()
            await self.release.wait()
        return record


async def test_a_read_that_started_before_a_change_notice_is_not_joined(
    parts: tuple[SimulationStore, AccountStore, Bus],
) -> None:
    store, accounts, bus = parts
    owner, _ = await accounts.create_user("ada", "acme")
    record = await store.create(owner, "sim", {}, None)
    held = _HeldStore(store._engine)
    catalog = SimulationCatalog(held, bus, max_size=8, ttl_s=5.0)
    before = asyncio.ensure_future(catalog.get(record.id))
    await asyncio.wait_for(held.read_done.wait(), 5)  # it has read the live simulation
    await store.delete(record.id)
    catalog.forget(record.id)  # the change notice
    assert await catalog.get(record.id) is None  # a read of its own, not the held one
    held.release.set()
    assert (await before) is not None
    assert await catalog.get(record.id) is None  # the older read did not fill the cache
    catalog.close()
