"""What a run is made of, apart from its journal: the spec that rebuilds its engine.

A run is identified by ``run_id`` (a uuid per start: starting again is a new run). Its
``data`` is the simulation's data as it was at the start (a later edit does not change a
running run) and ``start`` the simulated start instant actually used (``start_ts``, or the
wall clock at the start when it is not set). The owner stores the spec in the run's
``simulator_runs`` row; any node rebuilds the same engine from it. ``ClockState`` pins the
run's simulated clock to the wall clock, so a run taken over at real-time speed goes on at
the same simulated time as if its node had never stopped. Pure.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .engine import Engine
from .settings import SimulatorSettings, read_settings


@dataclass(frozen=True, slots=True)
class RunSpec:
    """The seed, settings and start of one run (see the module docstring)."""

    run_id: str
    data: dict[str, Any] | None
    start: datetime

    @classmethod
    def new(cls, data: dict[str, Any] | None) -> RunSpec:
        settings = read_settings(data)
        start = settings.start_ts or datetime.now(UTC).replace(microsecond=0)
        return cls(uuid.uuid4().hex, data, start)

    @property
    def settings(self) -> SimulatorSettings:
        return read_settings(self.data)

    def engine(self, simulation_id: int) -> Engine:
        """A fresh engine for the run, at its simulated second 0."""
        return Engine(simulation_id, self.settings, self.start)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "data": self.data, "start": self.start.isoformat()}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> RunSpec:
        return cls(str(body["run_id"]), body.get("data"),
                   datetime.fromisoformat(str(body["start"])))


@dataclass(frozen=True, slots=True)
class ClockState:
    """At wall time ``wall`` (epoch s) the run's clock read ``sim`` simulated seconds."""

    wall: float
    sim: float

    def now(self, wall: float, factor: float | None, paused: bool) -> float:
        """The simulated time at ``wall`` (a paused or 'max' run stands where it was)."""
        if paused or factor is None:
            return self.sim
        return self.sim + max(0.0, wall - self.wall) * factor

    def to_json(self) -> dict[str, Any]:
        return {"wall": self.wall, "sim": self.sim}

    @classmethod
    def from_json(cls, body: dict[str, Any] | None) -> ClockState | None:
        if not body:
            return None
        return cls(float(body["wall"]), float(body["sim"]))
