"""When a run's snapshot is taken, and how a takeover starts from the newest one.

``Checkpointer`` is a run's: the runner asks it, between two steps and with nothing in
flight, whether a snapshot is due (every ``SnapshotPolicy.every_s`` simulated seconds, or
``every_events`` events, whichever comes first); ``take`` encodes the engine
(``core/snapshot.py``) with the journal entries applied and the events committed by then, and
stores it in the background (one write at a time; a snapshot over ``max_bytes`` is skipped
with a warning). A snapshot never stops a run: if storing it fails, the run goes on and a
takeover starts from an older one or from the start.

``restore`` is the other end: the run's newest snapshot, decoded, or None when there is none
or it is of another format (then the takeover replays the run from its start, as before).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from ...store.snapshots import SnapshotStore, StoredSnapshot
from ..core import snapshot as codec
from ..core.engine import Engine
from ..core.spec import RunSpec
from .engine_handle import EngineHandle
from .resume import Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """How often a run's snapshot is taken and how big one may be (see config.py)."""

    every_s: float = 900.0
    every_events: int = 200_000
    max_bytes: int = 64 * 1024 * 1024

    @property
    def enabled(self) -> bool:
        return self.every_s > 0 or self.every_events > 0


class Checkpointer:
    """Takes one run's snapshots; see the module docstring."""

    def __init__(self, store: SnapshotStore, simulation_id: int, run_id: str,
                 policy: SnapshotPolicy, *, now: float = 0.0) -> None:
        self.store = store
        self.simulation_id = simulation_id
        self.run_id = run_id
        self.policy = policy
        self._next_t = now + policy.every_s if policy.every_s > 0 else float("inf")
        self._events = 0
        self._task: asyncio.Task[None] | None = None
        #: Snapshots stored and skipped (too big, or the previous write still running).
        self.taken = 0
        self.skipped = 0

    def produced(self, count: int) -> None:
        """The run produced ``count`` more events."""
        self._events += count

    def due(self, now: float) -> bool:
        every = self.policy.every_events
        return now >= self._next_t or (every > 0 and self._events >= every)

    async def take(self, engine: EngineHandle, journal_seq: int, progress: Progress) -> None:
        """Encode the engine now (every event it produced is committed: ``progress``), where
        it computes (an engine process encodes its own), and store it in the background."""
        every = self.policy.every_s
        self._next_t = engine.now + every if every > 0 else float("inf")
        self._events = 0
        if self._task is not None and not self._task.done():
            self.skipped += 1
            return
        body = await engine.snapshot()
        if len(body) > self.policy.max_bytes:
            self.skipped += 1
            log.warning("simulator of simulation %s: snapshot of %d bytes is over the limit "
                        "(RIDECAST_SIMULATOR_SNAPSHOT_MAX_BYTES=%d); not stored (a takeover "
                        "replays from the previous one)", self.simulation_id, len(body),
                        self.policy.max_bytes)
            return
        snap = StoredSnapshot(self.run_id, self.simulation_id, engine.now,
                              codec.FORMAT_VERSION, journal_seq, progress.count,
                              progress.last_id, body)
        self._task = asyncio.create_task(self._save(snap),
                                         name=f"simulator-{self.simulation_id}-snapshot")

    async def _save(self, snap: StoredSnapshot) -> None:
        try:
            await self.store.save(snap)
        except Exception as exc:  # the run goes on; a takeover starts from an older one
            self.skipped += 1
            log.warning("simulator of simulation %s: storing its snapshot failed (%s)",
                        self.simulation_id, type(exc).__name__)
        else:
            self.taken += 1

    async def close(self) -> None:
        """Wait for the write in flight."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task


@dataclass(frozen=True, slots=True)
class Restored:
    """A run's engine from its newest snapshot (decoded, and as stored: an engine process
    decodes its own copy), and where that snapshot stood."""

    engine: Engine
    body: bytes
    journal_seq: int
    progress: Progress


async def restore(store: SnapshotStore, spec: RunSpec) -> Restored | None:
    """The run's newest snapshot, decoded; None when it has none or it cannot be loaded
    (another format version, or damaged): the caller replays the run from its start."""
    snap = await store.newest(spec.run_id)
    if snap is None:
        return None
    try:
        engine = codec.loads(snap.body, spec.settings)
    except codec.SnapshotFormatError as exc:
        log.warning("simulator run %s: its snapshot at %.0f s cannot be loaded (%s); "
                    "replaying the run from its start", spec.run_id, snap.sim_t, exc)
        return None
    return Restored(engine, snap.body, snap.journal_seq,
                    Progress(snap.event_count, snap.last_event_id))
