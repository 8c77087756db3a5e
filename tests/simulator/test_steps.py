"""The engine's output does not depend on how simulated time is cut into steps.

A runner advances the engine to wherever its clock says (a real-time clock in uneven steps, the
fast clock in fixed ones), a takeover replays it in one long step: all of them must give the
same events, in the same order, with the same data. Hypothesis draws the steps, including
steps of zero and steps that land exactly on timers (multiples of the GPS and snapshot
periods) and on the end of demand.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.settings import Circle

START = datetime(2024, 5, 6, 7, 50, tzinfo=UTC)  # crosses 08:00: a congestion change
STRAIGHT = SimulatorSettings(
    seed=11, vehicles=6, bookings_per_hour=400, duration_s=870, speed="max",
    network="straight", area=Circle(lat=48.8566, lon=2.3522, radius_m=2500),
    vehicle_break_probability=0.5, break_duration_s=120, kpi_warmup_s=300,
    rebalance_interval_s=120,
)
STREETS = SimulatorSettings(
    seed=5, vehicles=5, bookings_per_hour=300, duration_s=900, speed="max",
    network="gothenburg", area=Circle(lat=57.705, lon=11.963, radius_m=2500),
    vehicle_break_probability=1.0, break_duration_s=120, kpi_warmup_s=300,
    rebalance_interval_s=120,
)
# Little demand that ends off the snapshot period: the run is often idle when demand ends, so
# where the last step lands decides when it finishes unless the engine fixes that instant.
SPARSE = STRAIGHT.model_copy(update={"seed": 1, "bookings_per_hour": 3, "duration_s": 655,
                                     "vehicle_break_probability": 0.0,
                                     "performance_tracker_enabled": False})
BY_NAME = {"straight": STRAIGHT, "streets": STREETS, "sparse": SPARSE}

# Steps in simulated seconds: arbitrary ones, and ones that hit timers exactly.
STEP = st.one_of(
    st.floats(min_value=0.0, max_value=400.0, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1.0, 10.0, 20.0, 60.0, 120.0, 300.0, 900.0]),
)


def _stepped(settings_: SimulatorSettings, steps: list[float]) -> list[dict[str, Any]]:
    engine = Engine(9, settings_, START)
    events: list[dict[str, Any]] = []
    t = 0.0
    for step in steps:
        t += step
        events.extend(engine.advance(t))
        if engine.finished:
            return events
    # Then on in steps of a minute until the run is over, as the fast clock goes.
    while not engine.finished:
        t += 60.0
        events.extend(engine.advance(t))
    return events


@lru_cache(maxsize=2)
def _in_one_step(name: str) -> tuple[dict[str, Any], ...]:
    engine = Engine(9, BY_NAME[name], START)
    events = engine.advance(1e9)
    assert engine.finished
    return tuple(events)


def _first_difference(got: list[dict[str, Any]], want: tuple[dict[str, Any], ...]) -> str:
    for k, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"event {k}: {a} != {b}"
    return f"{len(got)} events instead of {len(want)}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, max_size=40))
def test_straight_lines_same_events_whatever_the_steps(steps: list[float]) -> None:
    """Straight-line model: any cutting of time gives the events of one long step."""
    want = _in_one_step("straight")
    got = _stepped(STRAIGHT, steps)
    assert got == list(want), _first_difference(got, want)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, max_size=40))
def test_streets_same_events_whatever_the_steps(steps: list[float]) -> None:
    """Road network (congestion changes on the hour, mid-edge anchors): likewise."""
    want = _in_one_step("streets")
    got = _stepped(STREETS, steps)
    assert got == list(want), _first_difference(got, want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, max_size=40))
def test_an_idle_end_of_demand_same_events_whatever_the_steps(steps: list[float]) -> None:
    """A run with nothing open when demand ends finishes at the same event however the
    last step falls."""
    want = _in_one_step("sparse")
    got = _stepped(SPARSE, steps)
    assert got == list(want), _first_difference(got, want)


def test_the_scenarios_cover_what_a_cutting_could_change() -> None:
    """The reference runs hold bookings, offers, breaks and GPS, and go past the end of
    demand: a test that passes on an empty stream would prove nothing."""
    for name in ("straight", "streets"):
        types = {e["message_type"] for e in _in_one_step(name)}
        assert {"bookings", "offers", "offer_accepted", "assignment", "gps_data",
                "vehicle_use", "node_status", "vehicle_states"} <= types, (name, types)
