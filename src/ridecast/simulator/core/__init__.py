"""The simulator's pure engine: settings, model, road network, demand, scheduler and events.

Nothing here awaits, opens a socket or touches the store or the bus (the layering contract
checks it). ``Engine.advance(until)`` returns the envelope dicts the simulation produced,
deterministic for a seed and its journal of operations; ``simulator.hosting`` drives it.
"""

from __future__ import annotations

from .engine import Engine
from .settings import SimulatorSettings, read_settings

__all__ = ["Engine", "SimulatorSettings", "read_settings"]
