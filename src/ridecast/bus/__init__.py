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


def create_bus(
    url: str, *, prefix: str = "ridecast", maxlen: int = 100_000,
    catch_up_interval_s: float = 1.0, timeout_s: float = 2.0,
    error_log_interval_s: float = 30.0,
) -> Bus:
    """The bus for ``RIDECAST_BUS_URL``: ``memory://`` or ``redis://...``.

    ``timeout_s`` bounds each publish and ping to Redis; ``error_log_interval_s`` spaces the
    log's reports while Redis is unreachable (``connectivity.py``).
    """
    if url.startswith("memory:"):
        return MemoryBus()
    if url.startswith(("redis://", "rediss://", "unix://")):
        try:
            from .redis import RedisBus
        except ImportError as exc:  # redis-py is the 'redis' extra
            raise ValueError(
                f"the Redis bus needs redis-py: pip install 'ridecast[redis]' ({exc})"
            ) from exc
        bus: Bus = RedisBus(url, prefix=prefix, maxlen=maxlen,
                            catch_up_interval_s=catch_up_interval_s, timeout_s=timeout_s,
                            error_log_interval_s=error_log_interval_s)
        return bus
    raise ValueError(f"unsupported RIDECAST_BUS_URL {url!r} (memory:// or redis://)")


__all__ = [
    "Bus",
    "BusMessage",
    "Handler",
    "LogReader",
    "MemoryBus",
    "SimulationChanged",
    "SimulatorCommand",
    "SimulatorReply",
    "StoredEvent",
    "Unsubscribe",
    "create_bus",
]
