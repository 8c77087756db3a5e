"""Rebalancing follows the demand the run has seen, with any number of idle vehicles."""

from __future__ import annotations

from datetime import UTC, datetime

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.model import BookingStatus
from ridecast.simulator.core.rebalance import plan_moves

START = datetime(2024, 5, 6, 10, 0, tzinfo=UTC)
BASE = dict(speed="max", network="straight", demand_profile=[1.0] * 24,
            vehicle_break_probability=0.0)


def test_one_idle_vehicle_goes_to_where_requests_went_unserved() -> None:
    engine = Engine(1, SimulatorSettings(seed=1, vehicles=1, bookings_per_hour=0, **BASE),
                    START)
    vehicle = engine.vehicles[1]
    far = (vehicle.anchor[0] + 0.03, vehicle.anchor[1])  # about 3 km north
    engine.now = 100.0
    for k in range(3):
        booking = engine.new_booking(far, (far[0], far[1] + 0.01), 1, 600.0, auto=False)
        engine.set_status(booking, BookingStatus.NO_OFFER)
        assert booking.id == k + 1
    moves = plan_moves(engine.bookings, [vehicle], engine.now, engine.settings,
                       engine.settings.area_centre())
    assert moves == [(vehicle, far)]
    # Once the requests are older than the window, nothing pulls it any more.
    assert plan_moves(engine.bookings, [vehicle], 100.0 + engine.settings.rebalance_window_s
                      + 1, engine.settings, engine.settings.area_centre()) == []


def test_small_fleet_rebalances_and_its_km_are_counted_apart() -> None:
    engine = Engine(1, SimulatorSettings(seed=3, vehicles=2, bookings_per_hour=12,
                                         duration_s=3 * 3600, rebalance_interval_s=300,
                                         **BASE), START)
    while not engine.finished:
        engine.advance(engine.now + 600.0)
    rebalance = sum(v.rebalance_m for v in engine.vehicles.values())
    assert rebalance > 0
    assert rebalance < sum(v.empty_m for v in engine.vehicles.values())
