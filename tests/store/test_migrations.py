"""Alembic migrations build exactly the schema the tables describe."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from ridecast.store.engine import upgrade_sync
from ridecast.store.tables import metadata


def test_migrations_match_the_tables(tmp_path: Path) -> None:
    """After upgrade to head, autogenerate finds no difference from store/tables.py."""
    db = tmp_path / "m.db"
    upgrade_sync(f"sqlite+aiosqlite:///{db}")
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    assert diff == [], f"write a migration for: {diff}"


def test_upgrade_is_idempotent(tmp_path: Path) -> None:
    """Running the migrations twice (every start does) changes nothing."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'twice.db'}"
    upgrade_sync(url)
    upgrade_sync(url)
