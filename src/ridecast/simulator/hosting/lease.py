"""Who runs which simulator: what the leases and status snapshots of ``simulator_runs`` mean.

A run (a started simulator) is owned by one node, the process whose ``owner_node`` id is in
its row, until ``lease_until``. The owner renews its leases and writes a status snapshot; any
other node reads the snapshot. Taking a run is one conditional UPDATE (or the first INSERT),
so two nodes can never both own it: the database, not a home-made protocol, decides, and it
dates every lease by its own clock (the SQL is ``store/simulator_runs.py``).

The row also holds what rebuilds the run on another node: its spec (``spec.py``) and its
progress (how many of its events are published, and its simulated clock). A row whose
status is running or paused and whose lease has passed belongs to a node that stopped (it
handed the run over on SIGTERM, or died): any node takes it over (``take_over``) and the run
goes on. A run without a spec (started before the journal existed) reads as
``interrupted`` instead, and can be started again. ``effective_status`` is that rule, pure.
"""

from __future__ import annotations

from typing import Any

from ...store.simulator_runs import (
    ACTIVE,
    TAKEOVER_PENDING,
    TAKEOVER_REPLAYING,
    LeaseStore,
    RunRecord,
)
from .runner import Status

__all__ = ["ACTIVE", "CLAIMED_STATUS", "IDLE_STATUS", "TAKEOVER_PENDING", "TAKEOVER_REPLAYING",
           "LeaseStore", "RunRecord", "effective_status", "interrupted"]

assert set(ACTIVE) == {Status.RUNNING.value, Status.PAUSED.value}

IDLE_STATUS: dict[str, Any] = {"status": Status.IDLE.value, "sim_ts": None, "kpis": {}}
# What a run reads as between its start being claimed and the owner's first snapshot: taking
# the lease marks the run running at once, so that a second start elsewhere is refused.
CLAIMED_STATUS: dict[str, Any] = {"status": Status.RUNNING.value, "sim_ts": None, "kpis": {}}


def interrupted(snapshot: dict[str, Any], was: str, reason: str) -> dict[str, Any]:
    """The status of a run whose owner went away: its last snapshot, marked ``interrupted``."""
    return {**snapshot, "status": Status.INTERRUPTED.value, "interrupted_status": was,
            "error": reason}


def effective_status(record: RunRecord, now: float) -> dict[str, Any]:
    """What ``GET .../simulator`` answers on a node that does not own the run: the owner's
    snapshot with ``owner_node``; a run whose owner stopped is being taken over
    (``owner_node`` null, ``takeover`` pending), or, without a spec, ``interrupted``.
    ``now``: a time of the database's clock (``record.read_at``)."""
    if record.status in ACTIVE and not record.live(now):
        if record.resumable:
            return {**record.status_json, "owner_node": None,
                    "takeover": TAKEOVER_PENDING}
        return interrupted(
            record.status_json, record.status,
            "the node running this simulator stopped renewing its lease; start it again",
        )
    if record.status in ACTIVE:
        return {**record.status_json, "owner_node": record.owner_node}
    return dict(record.status_json)
