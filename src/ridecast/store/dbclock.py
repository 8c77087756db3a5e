"""The database's clock in SQL: one time for every node that shares the store.

Leases (who owns what, until when) are dated and compared by this clock inside the
statements that take, renew and read them, never by a node's own wall clock, so a node
whose clock is off does not take a live lease nor keep a dead one. ``db_epoch()`` is the
database's time in epoch seconds: ``clock_timestamp()`` on PostgreSQL (the time of the
statement, not of its transaction), ``julianday('now')`` on SQLite (the time of the
statement, read by the process that runs it: SQLite has no server). The dialect difference
lives here only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


class db_epoch(FunctionElement[float]):
    """The database's current time, epoch seconds (a SQL expression)."""

    type = Float()
    inherit_cache = True
    name = "db_epoch"


# Julian day 2440587.5 is the Unix epoch. julianday('now') counts whole milliseconds, so it
# reads up to 1 ms behind the process's clock: a row written "due now" by that clock would
# not yet be due to a claim in the same millisecond. The end of the millisecond is never
# behind it (and a lease dated by it ends no sooner than one dated by the process's clock).
SQLITE_EPOCH = "((julianday('now') - 2440587.5) * 86400.0 + 0.001)"


@compiles(db_epoch)
def _sqlite_epoch(_element: db_epoch, _compiler: Any, **_kw: Any) -> str:
    return SQLITE_EPOCH


POSTGRES_EPOCH = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


@compiles(db_epoch, "postgresql")
def _postgres_epoch(_element: db_epoch, _compiler: Any, **_kw: Any) -> str:
    return POSTGRES_EPOCH
