"""The built-in ride-pooling simulator and the operations that drive it.

The pure core (settings, model, polyline, travel, scheduler, rng, engine, kpis) never awaits:
``Engine.advance(until)`` returns the envelope dicts the simulation produced, deterministic for
a seed. The thin async layer (clock, runner, manager) drives an engine in real or accelerated
time and hands its events to a sink (the app wires it to ``Ingest.submit``).
"""

from __future__ import annotations

from .engine import Engine
from .settings import SimulatorSettings, read_settings

__all__ = ["Engine", "SimulatorSettings", "read_settings"]
