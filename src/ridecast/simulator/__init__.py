"""The built-in ride-pooling simulator and the operations that drive it.

Two packages, the way python-websockets keeps its sans-I/O protocol apart from its asyncio
layer:

* ``core``: the pure engine (settings, model, network, travel, demand, scheduler, rng, engine,
  KPIs, events). It never awaits: ``Engine.advance(until)`` returns the envelope dicts the
  simulation produced, deterministic for a seed.
* ``hosting``: what runs engines for a node (clock, runner, manager, cluster host, leases,
  journal, resume) and hands their events to a sink (the app wires it to ``Ingest.submit``).
"""

from __future__ import annotations

from .core.engine import Engine
from .core.settings import SimulatorSettings, read_settings

__all__ = ["Engine", "SimulatorSettings", "read_settings"]
