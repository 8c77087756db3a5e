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


def test_downgrade_from_0009_keeps_successes_as_attempt_rows(tmp_path: Path) -> None:
    """0009 keeps a delivery's success on its row; going back moves it to webhook_attempts."""
    from alembic import command
    from sqlalchemy import text

    from ridecast.store.engine import _alembic_config

    url = f"sqlite+aiosqlite:///{tmp_path / 'down.db'}"
    upgrade_sync(url)
    engine = create_engine(f"sqlite:///{tmp_path / 'down.db'}")
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO webhook_deliveries (id, event_id, simulation_id, message_type, url, "
            "status, attempt_count, next_attempt_at, created_at, updated_at, ordered, "
            "success_started_at, success_latency_ms, success_status_code, "
            "success_response_body) VALUES (7, 1, 1, 'bookings', 'http://a/', 'succeeded', 1, "
            "0, 0, 0, 1, 5.0, 1.5, 204, 'ok')"))
    command.downgrade(_alembic_config(url), "0008")
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT delivery_id, started_at, latency_ms, status_code, response_body "
            "FROM webhook_attempts")).all()
    engine.dispose()
    assert [tuple(r) for r in rows] == [(7, 5.0, 1.5, 204, "ok")]
