"""The event log under pressure and failure: bounded queue, errors that clients can act on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from ridecast.bus import MemoryBus
from ridecast.errors import ServiceUnavailable
from ridecast.simulations.catalog import SimulationCatalog
from ridecast.store.engine import create_engine, upgrade
from ridecast.store.eventlog import EventLog, NewEvent
from ridecast.store.simulations import SimulationStore


def _batch(size: int) -> list[NewEvent]:
    return [NewEvent(simulation_id=1, org_id=1, owner_id=1, message_type="vehicle_use",
                     body=b'{"n":%d}' % n) for n in range(size)]


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'log.db'}"
    await upgrade(url)
    yield url


async def test_appends_beyond_the_pending_limit_are_refused_whole(url: str) -> None:
    """Back-pressure: with 5 events waiting, another batch is a 503 ingest_saturated."""
    engine = create_engine(url)
    log = EventLog(engine, MemoryBus(), max_pending=5)
    await log.start()
    try:
        results = await asyncio.gather(*(log.append(_batch(5)) for _ in range(4)),
                                       return_exceptions=True)
        accepted = [r for r in results if isinstance(r, list)]
        refused = [r for r in results if isinstance(r, ServiceUnavailable)]
        assert len(accepted) == 1 and len(refused) == 3
        assert all(r.code == "ingest_saturated" and r.retry_after for r in refused)
        # Nothing of a refused batch was stored; the accepted one is all there.
        async with engine.connect() as conn:
            stored = [row[0] for row in await conn.execute(text("SELECT id FROM events"))]
        assert stored == [e.event_id for e in accepted[0]]
        assert len(await log.append(_batch(5))) == 5  # the queue drained: accepted again
    finally:
        await log.close()
        await engine.dispose()


async def test_a_store_failure_is_a_503_and_the_writer_goes_on(url: str) -> None:
    """A failed write answers 503 (not the driver's error); the next write works."""
    engine = create_engine(url)
    log = EventLog(engine, MemoryBus())
    await log.start()
    try:
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE events RENAME TO events_away"))
        with pytest.raises(ServiceUnavailable) as refused:
            await log.append(_batch(2))
        assert refused.value.retry_after
        with pytest.raises(ServiceUnavailable):
            await log.read()
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE events_away RENAME TO events"))
        assert len(await log.append(_batch(2))) == 2
    finally:
        await log.close()
        await engine.dispose()


async def test_the_simulation_cache_is_bounded(url: str) -> None:
    """Touching many ids (none of which exist) never grows the cache past its limit."""
    engine = create_engine(url)
    catalog = SimulationCatalog(SimulationStore(engine), MemoryBus(), max_size=10)
    try:
        for simulation_id in range(1, 200):
            assert await catalog.get(simulation_id) is None
        assert len(catalog._cache) == 10
    finally:
        catalog.close()
        await engine.dispose()
