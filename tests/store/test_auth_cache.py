"""The credential cache: concurrent misses share one store check, and a used entry is
checked again in the background before it expires (so a revocation made by another process
still ends its use within ``AUTH_CACHE_S``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from ridecast.auth.credentials import ApiCredentials, BasicCredentials
from ridecast.auth.visibility import Principal
from ridecast.errors import Unauthorized
from ridecast.store.accounts import AUTH_CACHE_S, AccountStore
from ridecast.store.engine import create_engine, upgrade
from tests.waiting import eventually_async


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _CountingAccounts(AccountStore):
    """The real store, counting its credential checks against the database."""

    checks = 0

    async def _authenticate(self, creds: ApiCredentials, key_hash: str) -> Principal:
        self.checks += 1
        return await super()._authenticate(creds, key_hash)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'accounts.db'}"
    await upgrade(url)
    engine = create_engine(url)
    yield engine
    await engine.dispose()


async def test_concurrent_misses_share_one_check(engine: AsyncEngine) -> None:
    _principal, key = await AccountStore(engine).create_user("ada", "acme")
    accounts = _CountingAccounts(engine)
    creds = BasicCredentials("ada", key)
    found = await asyncio.gather(*(accounts.authenticate(creds) for _ in range(32)))
    assert {p.name for p in found} == {"ada"}
    assert accounts.checks == 1
    wrong = BasicCredentials("ada", key + "x")
    refused = await asyncio.gather(*(accounts.authenticate(wrong) for _ in range(8)),
                                   return_exceptions=True)
    assert all(isinstance(r, Unauthorized) for r in refused)
    assert accounts.checks == 2


async def test_a_used_entry_is_checked_again_before_it_expires(engine: AsyncEngine) -> None:
    """Another process revokes the key: this one's entry, in use, is dropped by its
    background check while it is still young enough to be used."""
    _principal, key = await AccountStore(engine).create_user("ada", "acme")
    clock = _Clock()
    accounts = _CountingAccounts(engine, clock=clock)
    creds = BasicCredentials("ada", key)
    assert (await accounts.authenticate(creds)).name == "ada"
    await AccountStore(engine).revoke_user("ada")  # another process: this cache not cleared
    clock.now += AUTH_CACHE_S / 2 - 0.1
    running = asyncio.all_tasks()
    assert accounts.cached_principal(creds) is not None  # young: used, not checked again
    assert asyncio.all_tasks() == running  # a check would be a task started by that call
    assert accounts.checks == 1
    clock.now += 0.2
    assert accounts.cached_principal(creds) is not None  # checked again meanwhile
    await eventually_async(lambda: accounts.cached_principal(creds) is None, timeout=5,
                           step=0.005, what="the cached principal dropped")
    assert accounts.checks == 2
    with pytest.raises(Unauthorized):
        await accounts.authenticate(creds)
