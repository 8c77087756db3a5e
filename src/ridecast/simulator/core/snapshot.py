"""A versioned snapshot of an engine's whole state: ``dumps(engine)`` and ``loads(data, ...)``.

A snapshot is a header (magic and format version) and a zlib-compressed pickle of the
engine. The road network is large, read-only and shared by every run of a process, so it is
not stored: it is pickled as a reference and reattached from the run's settings on load. The
travel model's search caches (shortest-path trees by node) are pure functions of that network
and are dropped too, and so are the engine's cache of encoded legs and its emitter's of
formatted timestamps; what else the travel model remembers (the congestion factor, mid-edge
positions) is state that later events depend on, and is kept (the mid-edge positions resolved
as their first use would resolve them, without the legs they were seen on). Everything else in
the engine is plain data (dicts, lists, dataclasses, ``random.Random``), so a restored engine
gives byte for byte the events the original would have given from that point on
(tests/simulator/test_snapshot.py). The engine retires the bookings that ended long ago into
a tally of their KPIs (``tally.py``), so a snapshot is about as big at any age of the run.

``FORMAT_VERSION`` changes whenever the engine's state changes shape in a way an older
pickle cannot be loaded into. ``loads`` migrates the formats in ``MIGRATED`` (format 1, which
kept every booking of the run) and raises ``SnapshotFormatError`` for any other version (or a
damaged snapshot): the caller falls back to replaying the run from its start.
Pure: no I/O.
"""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from collections import OrderedDict, deque
from typing import Any

from .emit import Emitter
from .engine import Engine
from .network import NetworkTravel, RoadNetwork, travel_for
from .settings import SimulatorSettings
from .tally import ENDED, Sample, Tally
from .world import DECISION_DIGITS, keep_finished_s

MAGIC = b"RCSNAP"
FORMAT_VERSION = 2
"""The engine state's layout; raise it when a snapshot of the previous one cannot load."""
MIGRATED = frozenset({1})
"""Older formats ``loads`` migrates (``_from_v1``); any other is refused."""
_HEADER = struct.Struct(">6sH")
_NETWORK = "road-network"
# NetworkTravel attributes rebuilt from the network on load (pure caches and indexes).
_REBUILT = ("net", "_edge_m", "_node_at", "node_at", "_sources", "_targets", "_legs", "_pairs")
# Mid-edge positions the travel model remembers, stored resolved (``NetworkTravel.resolved``).
_RESOLVED = ("_mids", "_scratch")
# Pure caches of the engine (polylines of legs between two stops) and of its emitter
# (formatted timestamps), stored empty: the same values are computed again on demand.
_EMPTIED: dict[type, dict[str, Any]] = {Engine: {"_encoded": OrderedDict()},
                                         Emitter: {"_ts_memo": {}}}


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
            for name in _RESOLVED:
                state[name] = obj.resolved(state[name])
            return _restore_travel, (obj.net, state)
        emptied = _EMPTIED.get(type(obj))
        if emptied is not None:
            func, args, state, *rest = obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
            return (func, args, {**state, **emptied}, *rest)
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
    if version != FORMAT_VERSION and version not in MIGRATED:
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
    if version == 1:
        _from_v1(engine)
    return engine


def _from_v1(engine: Engine) -> None:
    """Format 1 held every booking of the run and a list of every scheduler decision time:
    the decision times go into their sample, and the bookings that have ended are taken to
    have ended now (they are retired ``keep_finished_s`` later, their share of the KPIs
    tallied then). The events are the same: none depends on when a booking is retired."""
    state = vars(engine)
    settings = engine.settings
    decisions = Sample(significant=DECISION_DIGITS)
    decisions.extend(state.pop("decision_ms", ()))
    engine.decisions = decisions
    engine.tally = Tally(settings.dwell_s, settings.kpi_warmup_s)
    engine.keep_finished_s = keep_finished_s(settings)
    engine._ended = deque((engine.now, b.id) for b in engine.bookings.values()
                          if b.status in ENDED)
