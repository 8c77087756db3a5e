"""Simulations: the per-process catalog of simulation meta, and the simulation service."""

from __future__ import annotations

from .catalog import SimulationCatalog, SimulationMeta
from .service import SimulationService

__all__ = ["SimulationCatalog", "SimulationMeta", "SimulationService"]
