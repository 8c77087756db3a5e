"""The interfaces between the running parts, as the consumers see them.

Each part gets its collaborators in its constructor, typed by one of these protocols, and
``app.py`` is the one place that chooses the implementations and wires them (see
``docs/design.md``, "Seams"). Every protocol has an embedded implementation (one process,
SQLite, in-process bus) and a distributed one (PostgreSQL, Redis) or works unchanged on
both:

=====================  ==============================  ===================================
protocol               embedded                        distributed
=====================  ==============================  ===================================
``bus.Bus``            ``bus.memory.MemoryBus``        ``bus.redis.RedisBus``
``EventReader``        ``store.eventlog.EventLog`` on SQLite, or on PostgreSQL
``TokenChecker``       ``store.accounts.AccountStore`` on SQLite, or on PostgreSQL
``RevocationFeed``     ``store.revocations.RevocationWatcher`` (polls the store's epoch)
``SimulationDirectory`` ``simulations.SimulationCatalog`` (cache refreshed by the bus)
``SimulatorHost``      ``simulator.cluster_host.ClusterHost``: runs leased in the store, so
                       one node or many; commands forwarded to the owner on the bus
=====================  ==============================  ===================================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from .auth.visibility import Principal
from .bus import StoredEvent
from .simulations.catalog import SimulationMeta
from .simulator.core.commands import Command


class EventReader(Protocol):
    """Reads of the event log: bounds for ``since=``, pages after a cursor."""

    async def bounds(self) -> tuple[int, int]:
        """(oldest retained event_id, newest event_id); (0, 0) when the log is empty."""

    async def read(
        self, *, after: int = 0, limit: int = 100, simulation_id: int | None = None,
        message_types: Sequence[str] | None = None, org_id: int | None = None,
        upto: int | None = None,
    ) -> list[StoredEvent]:
        """Events with ``event_id > after`` in order, optionally filtered."""


class TokenChecker(Protocol):
    """Who a websocket token belongs to, and which held tokens no longer count."""

    async def check_token(self, token: str) -> tuple[Principal, float]:
        """The token's user and its expiry (unix s); raises ``Unauthorized``."""

    async def revoked_tokens(self, token_hashes: Iterable[str]) -> set[str]:
        """Those of ``token_hashes`` that no longer authorise a stream."""


class RevocationFeed(Protocol):
    """Tells every process, at once, that some user, key or token was revoked."""

    @property
    def epoch(self) -> int | None:
        """The revocation epoch last seen (changes with every revocation)."""

    def subscribe(self, listener: Callable[[], Awaitable[None]]) -> None:
        """Call ``listener`` after every revocation seen."""


class SimulationDirectory(Protocol):
    """Owner, organisation and webhook settings of a simulation, by id."""

    async def get(self, simulation_id: int) -> SimulationMeta | None:
        """The simulation's metadata, or None when it does not exist (or was deleted)."""


class SimulatorHost(Protocol):
    """Runs of the built-in simulator, wherever in the cluster each one lives."""

    async def start(self, simulation_id: int, data: dict[str, Any] | None, *,
                    org: int | None = None) -> dict[str, Any]:
        """Start a run with ``data.simulator`` (of organisation ``org``); its status."""

    async def pause(self, simulation_id: int) -> dict[str, Any]:
        """Pause the run; its status."""

    async def resume(self, simulation_id: int) -> dict[str, Any]:
        """Resume the run; its status."""

    async def stop(self, simulation_id: int) -> dict[str, Any]:
        """Stop the run; its status."""

    async def status(self, simulation_id: int) -> dict[str, Any]:
        """The run's state and KPIs."""

    async def operate(self, simulation_id: int, command: Command) -> dict[str, Any]:
        """Apply an operation (booking, offer answer, ...) to the run."""

    async def forget(self, simulation_id: int) -> None:
        """Stop and drop the run of a deleted simulation."""

    async def close(self) -> None:
        """Stop every run of this process (others take them over)."""
