"""Branch and bound in the scheduler: the cost bounds hold, and pruning changes no answer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core import scheduler as sch
from ridecast.simulator.core.settings import Circle

START = datetime(2024, 5, 6, 7, 40, tzinfo=UTC)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), vehicles=st.integers(3, 25), capacity=st.integers(1, 6),
       wait=st.floats(120.0, 900.0), detour=st.floats(1.0, 3.0), dwell=st.floats(0.0, 60.0),
       straight=st.booleans())
def test_pruned_search_equals_trying_every_candidate(seed: int, vehicles: int, capacity: int,
                                                     wait: float, detour: float, dwell: float,
                                                     straight: bool) -> None:
    """Every decision of a run (offers, acceptances, re-insertions; across a change of the
    congestion hour) is the same with and without pruning, and no candidate's cheapest
    insertion costs less than its bound."""
    config = SimulatorSettings(
        seed=seed, vehicles=vehicles, capacity=capacity, max_wait_s=wait,
        max_detour_factor=detour, dwell_s=dwell, bookings_per_hour=400, duration_s=1500,
        speed="max", area=Circle(lat=57.705, lon=11.963, radius_m=3000),
        vehicle_break_probability=0.5, break_duration_s=120,
        network="straight" if straight else None)
    engine = Engine(1, config, START)
    scheduler = engine.scheduler
    decisions = bounds_checked = 0
    best_insertion = sch.Scheduler.best_insertion
    best_in_vehicle = sch.Scheduler._best_in_vehicle
    bounded = sch.Scheduler._bounded
    costs: dict[int, float] = {}
    candidates: list[Any] = []

    def keeping(self: sch.Scheduler, *args: Any) -> Any:
        candidates[:] = bounded(self, *args)
        return candidates[:]

    def recording(self: sch.Scheduler, booking: Any, vehicle: Any, *args: Any) -> Any:
        found = best_in_vehicle(self, booking, vehicle, *args)
        if found is not None:
            costs[vehicle.id] = found.cost
        return found

    def both(self: sch.Scheduler, booking: Any, vehicles: Any, bookings: Any, now: float,
             prefer: int | None = None) -> Any:
        nonlocal decisions, bounds_checked
        fleet = list(vehicles)
        self.prune = False
        costs.clear()
        candidates.clear()
        full = best_insertion(self, booking, fleet, bookings, now, prefer)
        tried = dict(costs)
        self.prune = True
        pruned = best_insertion(self, booking, fleet, bookings, now, prefer)
        assert pruned == full
        if prefer is None:
            for bound, vid, _, _ in candidates:
                if vid in tried:
                    assert tried[vid] >= bound
                    bounds_checked += 1
        decisions += 1
        return pruned

    scheduler.best_insertion = both.__get__(scheduler)  # type: ignore[method-assign]
    scheduler._best_in_vehicle = recording.__get__(scheduler)  # type: ignore[method-assign]
    scheduler._bounded = keeping.__get__(scheduler)  # type: ignore[method-assign]
    while not engine.finished:
        engine.advance(engine.now + 60.0)
    assert decisions > 10
    assert bounds_checked > 0 or straight
