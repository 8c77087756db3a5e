"""``Many`` with ``values`` writes on SQLite exactly what ``executemany`` writes.

The multi-row statements are cut in power-of-two row counts under SQLite's limit of bound
variables; whatever the count of rows and the limit, the table must end up the same, rows
in the same order (an AUTOINCREMENT id is handed out in row order), in one transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine

from ridecast.store.outbox import SUCCESS_SQL as _SUCCESS_SQL
from ridecast.store.outbox import SUCCESS_VALUES_SQL as _SUCCESS_VALUES_SQL
from ridecast.store.tables import metadata
from ridecast.store.txsteps import Many, Query, Steps, _sqlite_run

ROW_SQL = "INSERT INTO t (a, b, c) VALUES (?, ?, ?)"
VALUES_SQL = "INSERT INTO t (a, b, c) {values}"


def _table() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, a INTEGER, b TEXT, c BLOB)")
    return db


def _insert(rows: list[tuple[int, str, bytes]], values: str | None) -> Steps[int]:
    yield Many(ROW_SQL, rows, values)
    found = yield Query("SELECT COUNT(*) FROM t")
    return int(found[0][0])


@settings(max_examples=60, deadline=None)
@given(count=st.integers(0, 700), limit=st.sampled_from([3, 7, 30, 999, 32766]))
def test_values_insert_writes_what_executemany_writes(count: int, limit: int) -> None:
    rows = [(n, f"row {n}", bytes([n % 256]) * (n % 5)) for n in range(count)]
    expected_db, db = _table(), _table()
    db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    assert _sqlite_run(expected_db, _insert(rows, None)) == count
    assert _sqlite_run(db, _insert(rows, VALUES_SQL)) == count
    query = "SELECT id, a, b, c FROM t ORDER BY id"
    assert db.execute(query).fetchall() == expected_db.execute(query).fetchall()


def test_a_failed_values_insert_leaves_nothing() -> None:
    """The statements of one ``Many`` are in the step transaction: all or none."""
    db = _table()
    db.execute("CREATE UNIQUE INDEX t_a ON t (a)")
    rows = [(n, "x", b"") for n in range(300)] + [(0, "again", b"")]  # the last one clashes
    with pytest.raises(sqlite3.IntegrityError):
        _sqlite_run(db, _insert(rows, VALUES_SQL))
    assert db.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)


def _success(batch: list[tuple[object, ...]], values: str | None) -> Steps[None]:
    yield Many(_SUCCESS_SQL, batch, values)


@pytest.fixture
def outbox_file(tmp_path: Path) -> Iterator[str]:
    path = f"{tmp_path}/outbox.db"
    engine = create_engine(f"sqlite:///{path}")
    metadata.create_all(engine)
    engine.dispose()
    yield path


@pytest.mark.skipif(_SUCCESS_VALUES_SQL is None, reason="UPDATE ... FROM needs SQLite 3.33")
def test_success_values_update_writes_what_the_row_update_writes(outbox_file: str) -> None:
    """The success batch as one statement (``store.outbox.SUCCESS_VALUES_SQL``) against the same
    batch row by row (``_SUCCESS_SQL``), on the real table: the same columns, and rows not in
    the batch untouched. Rows 31-40 are pending rows of an ordered unit: written only where
    the batch says their lane is held (``lane`` 1, every other one)."""
    results = []
    for values in (None, _SUCCESS_VALUES_SQL):
        db = sqlite3.connect(outbox_file, isolation_level=None)
        db.execute("DELETE FROM webhook_deliveries")
        db.executemany(
            "INSERT INTO webhook_deliveries (id, event_id, simulation_id, message_type, url, "
            "status, attempt_count, next_attempt_at, created_at, updated_at, ordered, "
            "claim_token, lease_until) VALUES (?, ?, 1, 'vehicle_use', 'http://x/', "
            "'delivering', ?, 0, 0, 0, 0, 'tok', 99)",
            [(n, 100 + n, n % 3) for n in range(1, 41)])
        db.execute("UPDATE webhook_deliveries SET status = 'pending', ordered = 1, "
                   "claim_token = NULL, lease_until = NULL WHERE id > 30")
        batch = [(5.0, 6.0, 1000.0 + n, 1.5 * n, 200 + n % 2, None if n % 4 else f"ok {n}", n,
                  "tok", n % 2)
                 for n in range(1, 41) if n % 5]  # every fifth row is not in the batch

        _sqlite_run(db, _success(batch, values))
        results.append(db.execute("SELECT * FROM webhook_deliveries ORDER BY id").fetchall())
        db.close()
    assert results[0] == results[1]
    # 24 leased rows of 1-30 in the batch; of 31-39 in it (not 35), the odd ones: 31, 33, 37, 39
    assert sum(1 for row in results[1] if "succeeded" in row) == 28
