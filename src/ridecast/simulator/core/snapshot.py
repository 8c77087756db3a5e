"""A versioned snapshot of an engine's whole state: ``dumps(engine)`` and ``loads(data, ...)``.

A snapshot is a header (magic and format version) and a zlib-compressed pickle of the
engine. The road network is large, read-only and shared by every run of a process, so it is
not stored: it is pickled as a reference and reattached from the run's settings on load. The
travel model's search caches (shortest-path trees by node) are pure functions of that network
and are dropped too; what else the travel model remembers (the congestion factor, mid-edge
positions, cached legs) is state that later events depend on, and is kept. Everything else in
the engine is plain data (dicts, lists, dataclasses, ``random.Random``), so a restored engine
gives byte for byte the events the original would have given from that point on
(tests/simulator/test_snapshot.py).

``FORMAT_VERSION`` changes whenever the engine's state changes shape in a way an older
pickle cannot be loaded into; ``loads`` raises ``SnapshotFormatError`` for any other version
(or a damaged snapshot), and the caller falls back to replaying the run from its start.
Pure: no I/O.
"""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from typing import Any

from .engine import Engine
from .network import NetworkTravel, RoadNetwork, travel_for
from .settings import SimulatorSettings

MAGIC = b"RCSNAP"
FORMAT_VERSION = 1
"""The engine state's layout; raise it when a snapshot of the previous one cannot load."""
_HEADER = struct.Struct(">6sH")
_NETWORK = "road-network"
# NetworkTravel attributes rebuilt from the network on load (pure caches and indexes).
_REBUILT = ("net", "_edge_m", "_node_at", "node_at", "_sources", "_targets", "_legs", "_pairs")


class SnapshotFormatError(ValueError):
    """The bytes are not a snapshot this code can load (another format version, or damaged)."""


def format_version(data: bytes) -> int | None:
    """The format version in a snapshot's header, or None when it has none."""
    if len(data) < _HEADER.size:
        return None
    magic, version = _HEADER.unpack_from(data)
    return int(version) if magic == MAGIC else None


def _restore_travel(network: RoadNetwork, state: dict[str, Any]) -> NetworkTravel:
    travel = NetworkTravel(network)
    for name, value in state.items():
        setattr(travel, name, value)
    return travel


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> str | None:
        return _NETWORK if isinstance(obj, RoadNetwork) else None

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is NetworkTravel:
            state = {k: v for k, v in vars(obj).items() if k not in _REBUILT}
            return _restore_travel, (obj.net, state)
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, network: RoadNetwork | None) -> None:
        super().__init__(file)
        self._network = network

    def persistent_load(self, pid: Any) -> Any:
        if pid != _NETWORK or self._network is None:
            raise SnapshotFormatError(f"the snapshot refers to {pid!r}, which its settings "
                                      "do not give")
        return self._network

    def find_class(self, module: str, name: str) -> Any:
        # The engine's own classes and the few standard ones its state holds; anything else
        # in a snapshot is not an engine's.
        if module.startswith(_ALLOWED_PREFIXES) or module in _ALLOWED_MODULES:
            return super().find_class(module, name)
        raise SnapshotFormatError(f"a snapshot does not hold {module}.{name}")


_ALLOWED_PREFIXES = ("ridecast.simulator.core.", "numpy.", "pydantic.", "pydantic_core.")
_ALLOWED_MODULES = frozenset({
    "builtins", "collections", "random", "datetime", "zoneinfo", "copyreg", "_codecs", "enum",
    "numpy", "pydantic", "pydantic_core",
})


def dumps(engine: Engine, *, level: int = 1) -> bytes:
    """The engine's state as a snapshot (header + compressed pickle)."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(engine)
    return _HEADER.pack(MAGIC, FORMAT_VERSION) + zlib.compress(buffer.getvalue(), level)


def loads(data: bytes, settings: SimulatorSettings) -> Engine:
    """The engine a snapshot holds, its road network reattached from ``settings`` (the
    run's). ``SnapshotFormatError`` when the snapshot is of another format or damaged."""
    version = format_version(data)
    if version != FORMAT_VERSION:
        raise SnapshotFormatError(
            f"snapshot format {version} is not this code's ({FORMAT_VERSION})")
    travel = travel_for(settings)
    network = travel.net if isinstance(travel, NetworkTravel) else None
    try:
        raw = zlib.decompress(data[_HEADER.size:])
        engine = _Unpickler(io.BytesIO(raw), network).load()
    except SnapshotFormatError:
        raise
    except Exception as exc:  # a damaged or foreign pickle
        raise SnapshotFormatError(f"the snapshot could not be read: {exc}") from exc
    if not isinstance(engine, Engine):
        raise SnapshotFormatError("the snapshot does not hold an engine")
    return engine
