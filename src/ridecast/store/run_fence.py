"""Writes fenced by a simulator run's lease: made only while their node holds it.

A run's owner writes its journal entries and its events. A node that stalled (SIGSTOP, a
paused VM, a long pause of its process) may wake after its lease ran out and another node
took the run over; what it computed before it noticed must then not be written. So each
such write checks, in its own transaction, that the run's ``simulator_runs`` row names the
node with a lease still live by the database's clock (``dbclock``); on PostgreSQL the row is
share-locked, so a takeover's UPDATE either comes first and the write is refused, or waits
until the write has committed and then sees it. A refused write raises ``LeaseLost`` and
leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, literal_column, select
from sqlalchemy.dialects import sqlite

from .dbclock import db_epoch
from .steps import Query
from .tables import simulator_runs as runs


class LeaseLost(RuntimeError):
    """A fenced write found that its node no longer holds the run's live lease."""


@dataclass(frozen=True, slots=True)
class RunFence:
    """The lease a write depends on: ``owner``'s, of simulation ``simulation_id``'s run."""

    simulation_id: int
    owner: str

    def holds(self) -> list[ColumnElement[bool]]:
        """The conditions on ``simulator_runs`` under which the lease is this owner's and
        live."""
        return [runs.c.simulation_id == self.simulation_id, runs.c.owner_node == self.owner,
                runs.c.lease_until > db_epoch()]

    def check(self) -> Select[Any]:
        """One row while the lease holds, none otherwise (share-locking the lease row)."""
        return select(literal_column("1")).where(*self.holds()).with_for_update(read=True)

    def check_step(self) -> Query:
        """``check`` as a step of a step transaction on SQLite (``store.txsteps``)."""
        return Query(_sqlite_check_sql(), {"simulation_id": self.simulation_id,
                                           "owner": self.owner})

    def refused(self, what: str) -> LeaseLost:
        """The error of a write refused by this fence; ``what``: what was not written."""
        return LeaseLost(f"this node no longer holds the lease of simulation "
                         f"{self.simulation_id}'s run: {what} not written")


@lru_cache(maxsize=1)
def _sqlite_check_sql() -> str:
    """``RunFence.check`` as SQLite text with ``:simulation_id`` and ``:owner``."""
    stmt: Select[Any] = (select(literal_column("1"))
            .where(runs.c.simulation_id == bindparam("simulation_id"),
                   runs.c.owner_node == bindparam("owner"),
                   runs.c.lease_until > db_epoch()))
    return str(stmt.compile(dialect=sqlite.dialect(paramstyle="named")))


__all__ = ["LeaseLost", "RunFence"]
