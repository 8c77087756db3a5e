"""KPIs of a run."""

from __future__ import annotations

from datetime import UTC, datetime

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.kpis import compute, percentile


def test_percentile_nearest_rank() -> None:
    """Nearest-rank percentiles; None for no values."""
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0


def test_kpis_of_a_run_are_consistent() -> None:
    """Counts add up; occupancy is passenger-km over vehicle-km."""
    engine = Engine(1, SimulatorSettings(speed="max", duration_s=1800), datetime(
        2024, 1, 1, tzinfo=UTC))
    engine.advance(1e9)
    k = compute(engine)
    assert k["bookings"] == k["offered"] + k["no_offer"]
    assert k["served"] + k["no_shows"] + k["cancellations"] + k["offers_rejected"] + k[
        "offers_expired"] + k["no_offer"] == k["bookings"]
    assert k["empty_km"] <= k["vehicle_km"]
    assert abs(k["occupancy"] - k["passenger_km"] / k["vehicle_km"]) < 1e-2
    assert k["wait_mean_s"] <= k["wait_p95_s"] <= engine.settings.max_wait_s
    assert k["ride_over_direct_mean"] >= 1.0
    assert k["scheduler_decisions"] >= k["bookings"]
