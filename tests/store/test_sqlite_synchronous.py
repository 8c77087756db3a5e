"""RIDECAST_SQLITE_SYNCHRONOUS chooses SQLite's synchronous mode on every connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from ridecast.store.engine import create_engine


async def _synchronous(url: str, mode: str) -> int:
    engine = create_engine(url, sqlite_synchronous=mode)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(text("PRAGMA synchronous"))).scalar_one())
    finally:
        await engine.dispose()


@pytest.mark.parametrize(("mode", "pragma"), [("normal", 1), ("full", 2)])
def test_each_connection_gets_the_chosen_mode(tmp_path: Path, mode: str, pragma: int) -> None:
    """normal (the default) is SQLite's 1, full is 2: a commit synced before its answer."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"
    assert asyncio.run(_synchronous(url, mode)) == pragma


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    """A mode other than normal or full is an error, not a silent default."""
    with pytest.raises(ValueError, match="normal or full"):
        create_engine(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", sqlite_synchronous="off")
