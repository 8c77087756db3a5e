"""KPIs of a run."""

from __future__ import annotations

from datetime import UTC, datetime

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.kpis import KpiCache, compute, percentile


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


def _run(warmup: float) -> tuple[Engine, list[dict[str, object]]]:
    settings = SimulatorSettings(speed="max", duration_s=2400, kpi_warmup_s=warmup,
                                 bookings_per_hour=150, seed=4)
    engine = Engine(1, settings, datetime(2024, 1, 1, 8, tzinfo=UTC))
    return engine, engine.advance(1e9)


def test_measured_kpis_leave_out_the_warm_up() -> None:
    """'measured' counts the bookings requested after the warm-up (as the stream shows them),
    splits rejections by cause, and states its window."""
    engine, events = _run(900.0)
    m = compute(engine)["measured"]
    assert m["window"]["warmup_s"] == 900.0 and m["window"]["started"]
    start = datetime(2024, 1, 1, 8, tzinfo=UTC).timestamp()
    later = [b for e in events if e["message_type"] == "bookings"
             for b in e["data"]["bookings"]  # type: ignore[index]
             if datetime.fromisoformat(b["requested_ts"]).timestamp() - start >= 900.0]
    assert m["requests"] == len(later) > 0
    r = m["rejections"]
    ended = m["served"] + m["no_shows"] + r["no_vehicle"] + r["rider_rejected"] + r["expired"]
    assert ended <= m["requests"]
    k = compute(engine)
    assert r["rider_rejected"] <= k["offers_rejected"] and r["expired"] <= k["offers_expired"]
    assert 0 < m["vehicle_km"] < k["vehicle_km"]
    assert abs(m["vehicle_km_empty"] + m["vehicle_km_occupied"] - m["vehicle_km"]) < 1e-2
    assert m["wait_s"]["mean"] <= engine.settings.max_wait_s
    assert m["detour"]["mean"] >= 1.0


def test_no_warm_up_measures_the_whole_run() -> None:
    """With kpi_warmup_s 0 'measured' agrees with the whole-run keys."""
    engine, _ = _run(0.0)
    k = compute(engine)
    m = k["measured"]
    assert m["requests"] == k["bookings"]
    assert m["served"] == k["served"]
    assert m["rejections"]["no_vehicle"] >= k["no_offer"]
    assert m["rejections"]["rider_rejected"] == k["offers_rejected"]
    assert m["rejections"]["expired"] == k["offers_expired"]
    assert abs(m["vehicle_km"] - k["vehicle_km"]) < 1e-2
    assert abs(m["vehicle_km_empty"] - k["empty_km"]) < 1e-2
    assert m["occupancy"] == k["occupancy"]


def test_kpi_cache_recomputes_when_the_run_moves_and_throttles_a_fast_run() -> None:
    """Same time, events and operations: the same answer without recomputing; a run at
    full speed is answered from the cache for up to a second, unless an operation ran."""
    engine = Engine(1, SimulatorSettings(seed=4, vehicles=3, bookings_per_hour=120,
                                         duration_s=1800), datetime(2024, 1, 1, 8, tzinfo=UTC))
    engine.advance(300.0)
    wall = [0.0]
    cache = KpiCache(max_age_s=1.0, monotonic=lambda: wall[0])
    first = cache.get(engine, 0, throttle=False)
    assert cache.get(engine, 0, throttle=False) is first
    engine.advance(600.0)
    assert cache.get(engine, 0, throttle=True) is first  # throttled: 0 s old
    assert cache.get(engine, 0, throttle=False)["bookings"] >= first["bookings"]
    second = cache.get(engine, 0, throttle=False)
    engine.advance(900.0)
    wall[0] = 0.5
    assert cache.get(engine, 1, throttle=True) is not second  # an operation ran
    third = cache.get(engine, 1, throttle=True)
    engine.advance(1200.0)
    wall[0] = 1.6
    fourth = cache.get(engine, 1, throttle=True)  # older than a second
    assert fourth is not third and fourth == compute(engine)


def test_kpi_cache_keeps_a_slow_computation_to_its_share_of_the_wall_time() -> None:
    """A computation that takes 0.1 s of a (fake) wall clock is reused for 5 s while
    throttled (2% of the wall time), and not beyond; an operation still refreshes it."""
    engine = Engine(1, SimulatorSettings(speed="max", bookings_per_hour=300,
                                         duration_s=1800), datetime(2024, 1, 1, 8, tzinfo=UTC))
    engine.advance(300.0)
    wall = [0.0]
    calls = [0]

    def clock() -> float:
        calls[0] += 1
        if calls[0] % 2 == 0:  # the reading after a computation: it took 0.1 s
            wall[0] += 0.1
        return wall[0]

    cache = KpiCache(max_age_s=1.0, max_share=0.02, monotonic=clock)
    first = cache.get(engine, 0, throttle=True)
    engine.advance(600.0)
    wall[0] = 4.0
    calls[0] = 2  # the next reading is a plain one (no computation is timed)
    assert cache.get(engine, 0, throttle=True) is first
    calls[0] = 0
    wall[0] = 5.2
    second = cache.get(engine, 0, throttle=True)
    assert second is not first and second == compute(engine)
    engine.advance(700.0)
    calls[0] = 0
    assert cache.get(engine, 1, throttle=True) is not second  # an operation ran
