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
from typing import Any

from sqlalchemy import ColumnElement

from .dbclock import POSTGRES_EPOCH, SQLITE_EPOCH, db_epoch
from .steps import Query
from .tables import simulator_runs as runs

_CHECK = ("SELECT 1 FROM simulator_runs WHERE simulation_id = :fence_simulation_id "
          "AND owner_node = :fence_owner AND lease_until > ")
SQLITE_CHECK = _CHECK + SQLITE_EPOCH
"""One row while the lease holds, none otherwise (``RunFence.params``), on SQLite."""
POSTGRES_CHECK = _CHECK + POSTGRES_EPOCH + " FOR SHARE"
"""The same on PostgreSQL, share-locking the lease row (a CTE of the event log's group
commit: ``eventlog``)."""


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

    def params(self) -> dict[str, Any]:
        """The parameters of ``SQLITE_CHECK`` and ``POSTGRES_CHECK``."""
        return {"fence_simulation_id": self.simulation_id, "fence_owner": self.owner}

    def check_step(self) -> Query:
        """The check as a step of a step transaction on SQLite (``store.txsteps``)."""
        return Query(SQLITE_CHECK, self.params())

    def refused(self, what: str) -> LeaseLost:
        """The error of a write refused by this fence; ``what``: what was not written."""
        return LeaseLost(f"this node no longer holds the lease of simulation "
                         f"{self.simulation_id}'s run: {what} not written")


__all__ = ["POSTGRES_CHECK", "SQLITE_CHECK", "LeaseLost", "RunFence"]
