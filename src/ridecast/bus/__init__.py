"""The event bus between the event log and its consumers (websocket hub, webhooks)."""

from __future__ import annotations

from .base import (
    Bus,
    BusMessage,
    Handler,
    SimulationChanged,
    SimulatorCommand,
    SimulatorReply,
    StoredEvent,
    Unsubscribe,
)
from .memory import MemoryBus


def create_bus(url: str) -> Bus:
    """The bus for ``RIDECAST_BUS_URL``: ``memory://`` or ``redis://...``."""
    if url.startswith("memory:"):
        return MemoryBus()
    if url.startswith(("redis://", "rediss://", "unix://")):
        try:
            from .redis import RedisBus  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:  # pragma: no cover - until the Redis bus lands
            raise ValueError(f"the Redis bus is not available: {exc}") from exc
        bus: Bus = RedisBus(url)
        return bus
    raise ValueError(f"unsupported RIDECAST_BUS_URL {url!r} (memory:// or redis://)")


__all__ = [
    "Bus",
    "BusMessage",
    "Handler",
    "MemoryBus",
    "SimulationChanged",
    "SimulatorCommand",
    "SimulatorReply",
    "StoredEvent",
    "Unsubscribe",
    "create_bus",
]
