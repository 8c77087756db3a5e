"""Re-optimisation moves bookings not yet picked up and keeps every promise made."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.model import BookingStatus
from ridecast.simulator.core.world import REOPTIMISE

START = datetime(2024, 5, 6, 10, 0, tzinfo=UTC)


def _settings(seed: int, **extra: Any) -> SimulatorSettings:
    return SimulatorSettings(seed=seed, vehicles=5, bookings_per_hour=90, duration_s=1800,
                             speed="max", network="straight", demand_profile=[1.0] * 24,
                             reoptimise_interval_s=30,
                             area={"lat": 57.705, "lon": 11.963, "radius_m": 3000}, **extra)


def _check_run(engine: Engine) -> int:
    """Run to the end, checking after every step: no booking on two routes, each booking
    on its vehicle's route; afterwards every pickup in its window and every ride within its
    limit; each vehicle's next stop is never replaced by a re-optimisation."""
    dwell = engine.settings.dwell_s
    rounds = [0]
    handler = engine._handlers[REOPTIMISE]

    def observed(target: int, version: int) -> None:
        # Around each round: every vehicle's next stop, where it is heading, stays next.
        heads = {vid: (v.route[0].id if v.route else None)
                 for vid, v in engine.vehicles.items()}
        handler(target, version)
        rounds[0] += 1
        for vid, head in heads.items():
            route = engine.vehicles[vid].route
            if head is not None:
                assert route and route[0].id == head, f"vehicle {vid}'s next stop changed"

    engine._handlers[REOPTIMISE] = observed
    while not engine.finished:
        engine.advance(engine.now + 7.0)
        seen: dict[int, int] = {}
        for vid, vehicle in engine.vehicles.items():
            for node in vehicle.route:
                owner = seen.setdefault(node.booking_id, vid)
                assert owner == vid, f"booking {node.booking_id} on {owner} and {vid}"
                assert engine.bookings[node.booking_id].vehicle_id == vid
    assert rounds[0] > 10
    for b in engine.bookings.values():
        if b.picked_up_t is not None:
            assert b.picked_up_t - dwell <= b.latest_pickup_t + 1e-6
        if b.dropped_off_t is not None and b.picked_up_t is not None:
            assert b.dropped_off_t - b.picked_up_t <= b.max_ride_s + 1e-6
    return engine.reoptimised


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(1, 10_000))
def test_no_promise_broken_and_no_booking_on_two_vehicles(seed: int) -> None:
    _check_run(Engine(1, _settings(seed), START))


def test_reoptimisation_moves_bookings_and_same_seed_same_events() -> None:
    moved = _check_run(Engine(1, _settings(3), START))
    assert moved > 0
    def events(s: SimulatorSettings) -> list[dict[str, Any]]:
        engine = Engine(1, s, START)
        out: list[dict[str, Any]] = []
        while not engine.finished:
            out += engine.advance(engine.now + 13.0)
        return out
    assert events(_settings(3)) == events(_settings(3))


def test_refused_requests_are_retried_before_no_offer() -> None:
    def run(retry_s: float) -> Engine:
        engine = Engine(1, SimulatorSettings(
            seed=2, vehicles=4, bookings_per_hour=90, duration_s=1800, speed="max",
            network="straight", demand_profile=[1.0] * 24, retry_s=retry_s,
            area={"lat": 57.705, "lon": 11.963, "radius_m": 3000}), START)
        while not engine.finished:
            engine.advance(engine.now + 60.0)
        return engine
    without, with_retry = run(0), run(300)
    served = [sum(b.status is BookingStatus.COMPLETED for b in e.bookings.values())
              for e in (without, with_retry)]
    assert served[1] > served[0]
    # A retried request gets its offer after its request time.
    late = [b for b in with_retry.bookings.values() if b.offer_id is not None
            and with_retry.offers[b.offer_id].expires_t - with_retry.settings.offer_timeout_s
            > b.requested_t + 1.0]
    assert late


def test_a_moved_booking_is_published_on_both_routes() -> None:
    """A booking moved to another vehicle: an ``assignment`` of the new vehicle with its
    nodes and one of the old vehicle without them, in the same round's events."""
    engine = Engine(1, _settings(3), START)
    handler = engine._handlers[REOPTIMISE]
    checked = [0]

    def observed(target: int, version: int) -> None:
        before = {b.id: b.vehicle_id for b in engine.bookings.values()
                  if b.status is BookingStatus.ASSIGNED}
        engine.emitter.drain()
        handler(target, version)
        events = engine.emitter.drain()
        routes = {}
        for event in events:
            if event["message_type"] == "assignment":
                data = event["data"]
                routes[data["vehicle_id"]] = {n["booking_id"] for n in data["nodes"]}
        assert all(e["message_type"] in ("assignment", "vehicle_state_changed")
                   for e in events)
        for bid, old in before.items():
            new = engine.bookings[bid].vehicle_id
            if new != old:
                assert bid in routes[new] and bid not in routes[old]
                checked[0] += 1

    engine._handlers[REOPTIMISE] = observed
    while not engine.finished:
        engine.advance(engine.now + 30.0)
    assert checked[0] > 0
