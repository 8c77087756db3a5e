"""Simulations: the per-process catalog of simulation meta, and the simulation service."""

from __future__ import annotations

from .service import (
    SimulationCatalog,
    SimulationMeta,
    SimulationService,
    simulation_json,
    template_json,
)

__all__ = [
    "SimulationCatalog",
    "SimulationMeta",
    "SimulationService",
    "simulation_json",
    "template_json",
]
