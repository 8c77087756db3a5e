"""A seeded run with a fixed journal, in a process of its own (test_determinism_processes.py).

    python -m tests.simulator.determinism_run full OUT
    python -m tests.simulator.determinism_run snapshot OUT SNAP   # also the engine at MID
    python -m tests.simulator.determinism_run resume SNAP OUT     # from that snapshot on

OUT gets the events (orjson, one a line) from simulated second 0 (from the snapshot's point
for ``resume``) to ``END``.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core import snapshot
from ridecast.simulator.core.commands import Command, apply

START = datetime(2024, 5, 6, 7, 30, tzinfo=UTC)
SETTINGS = SimulatorSettings(seed=11, vehicles=15, bookings_per_hour=200, duration_s=3000,
                             speed="max", network="gothenburg",
                             performance_tracker_enabled=True, vehicle_break_probability=0.3)
TRIP = {"pickup_lat": 57.70, "pickup_lon": 11.96, "dropoff_lat": 57.72, "dropoff_lon": 11.99,
        "passengers": 2, "max_wait_s": None}
JOURNAL = [
    (300.0, Command("create_booking", TRIP)),
    (650.0, Command("set_vehicle_enabled", {"vehicle_id": 2, "enabled": False})),
    (1400.0, Command("create_booking", {**TRIP, "passengers": 1})),
    (1900.0, Command("set_vehicle_enabled", {"vehicle_id": 2, "enabled": True})),
    (2200.0, Command("create_booking", TRIP)),
]
MID = 1200.0
END = 3600.0


def _run(engine: Engine, until: float, out: list[dict[str, Any]]) -> None:
    for at, command in JOURNAL:
        if engine.now < at <= until:
            out += engine.advance(at)
            out += apply(engine, command)[1]
    out += engine.advance(until)


def _write(path: str, events: list[dict[str, Any]]) -> None:
    Path(path).write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))


def main(argv: list[str]) -> None:
    mode = argv[0]
    events: list[dict[str, Any]] = []
    if mode == "resume":
        engine = snapshot.loads(Path(argv[1]).read_bytes(), SETTINGS)
        _run(engine, END, events)
        _write(argv[2], events)
        return
    engine = Engine(1, SETTINGS, START)
    if mode == "snapshot":
        _run(engine, MID, events)
        Path(argv[2]).write_bytes(snapshot.dumps(engine))
    _run(engine, END, events)
    _write(argv[1], events)


if __name__ == "__main__":
    main(sys.argv[1:])
