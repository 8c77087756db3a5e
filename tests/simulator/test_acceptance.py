"""Simulated riders weigh an offer's wait and detour (acceptance.py)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from ridecast.errors import BadRequest
from ridecast.simulator import Engine, SimulatorSettings, read_settings
from ridecast.simulator.core.acceptance import acceptance_probability
from ridecast.simulator.core.model import OfferStatus

START = datetime(2024, 5, 6, 10, 0, tzinfo=UTC)


def test_linear_between_thresholds() -> None:
    s = SimulatorSettings(acceptance_probability=0.9, acceptance_wait_full_s=300,
                          acceptance_wait_zero_s=900, acceptance_detour_full=1.5,
                          acceptance_detour_zero=2.5)
    assert acceptance_probability(s, 0.0, 1.0) == pytest.approx(0.9)
    assert acceptance_probability(s, 300.0, 1.5) == pytest.approx(0.9)
    assert acceptance_probability(s, 600.0, 1.0) == pytest.approx(0.45)
    assert acceptance_probability(s, 600.0, 2.0) == pytest.approx(0.225)
    assert acceptance_probability(s, 900.0, 1.0) == 0.0
    assert acceptance_probability(s, 0.0, 3.0) == 0.0
    flat = s.model_copy(update={"acceptance_model": "flat"})
    assert acceptance_probability(flat, 5000.0, 9.0) == pytest.approx(0.9)


def test_thresholds_in_order() -> None:
    with pytest.raises(BadRequest):
        read_settings({"simulator": {"acceptance_wait_full_s": 600,
                                     "acceptance_wait_zero_s": 300}})


def _accepted_share(settings: SimulatorSettings) -> tuple[float, float]:
    """Accepted share of offers with a short and with a long offered wait."""
    engine = Engine(1, settings, START)
    engine.keep_finished_s = math.inf  # every offer of the run is looked at afterwards
    while not engine.finished:
        engine.advance(engine.now + 600.0)
    short, long = [0, 0], [0, 0]
    for offer in engine.offers.values():
        booking = engine.bookings[offer.booking_id]
        wait = offer.estimated_pickup_t - booking.requested_t
        bucket = short if wait < 240 else long if wait > 420 else None
        if bucket is not None:
            bucket[0] += offer.status is OfferStatus.ACCEPTED
            bucket[1] += 1
    assert short[1] > 20 and long[1] > 20
    return short[0] / short[1], long[0] / long[1]


def test_riders_refuse_long_waits_more_often() -> None:
    settings = SimulatorSettings(seed=2, vehicles=14, bookings_per_hour=300, duration_s=3600,
                                 speed="max", network="straight", max_wait_s=900,
                                 demand_profile=[1.0] * 24, cancellation_probability=0,
                                 vehicle_break_probability=0, expiry_share=0,
                                 acceptance_wait_full_s=200, acceptance_wait_zero_s=900)
    short, long = _accepted_share(settings)
    assert short > long + 0.2
    flat_short, flat_long = _accepted_share(settings.model_copy(
        update={"acceptance_model": "flat"}))
    assert abs(flat_short - flat_long) < 0.15
