"""Statements for ``exec_driver_sql`` come out in each driver's parameter style."""

from __future__ import annotations

from sqlalchemy.dialects.postgresql import asyncpg
from sqlalchemy.dialects.sqlite import aiosqlite

from ridecast.store.driver_sql import in_paramstyle, insert_sql
from ridecast.store.tables import webhook_attempts

COLUMNS = ("delivery_id", "started_at", "latency_ms", "status_code", "error_class", "error",
           "response_body")
HEAD = ("INSERT INTO webhook_attempts (delivery_id, started_at, latency_ms, status_code, "
        "error_class, error, response_body) VALUES ")


def test_insert_in_each_drivers_style() -> None:
    assert insert_sql(aiosqlite.dialect(), webhook_attempts, COLUMNS) == (
        HEAD + "(?, ?, ?, ?, ?, ?, ?)")
    assert insert_sql(asyncpg.dialect(), webhook_attempts, COLUMNS) == (
        HEAD + "($1, $2, $3, $4, $5, $6, $7)")


def test_placeholders_are_numbered_in_order() -> None:
    sql = "UPDATE t SET a = ?, b = ? WHERE id = ?"
    assert in_paramstyle(aiosqlite.dialect(), sql) == sql
    assert in_paramstyle(asyncpg.dialect(), sql) == "UPDATE t SET a = $1, b = $2 WHERE id = $3"
