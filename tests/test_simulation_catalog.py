"""The simulation catalog is bounded (LRU) and expires entries (TTL) even without a bus notice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ridecast.bus import create_bus
from ridecast.bus.base import Bus
from ridecast.simulations import SimulationCatalog
from ridecast.store.accounts import AccountStore
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.simulations import SimulationStore


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
