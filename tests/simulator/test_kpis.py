"""KPIs of a run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.kpis import KpiCache, compute, percentile


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
    cache = KpiCache(max_age_s=1.0, monotonic=lambda: wall[0], cpu=lambda: 0.0)
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


def test_kpi_cache_bounds_what_pollers_cost_by_how_long_the_kpis_took() -> None:
    """KPIs that took 0.1 s of CPU are reused for 50 times that (5 s) while the run moves,
    even unthrottled; an operation still gets fresh ones at once."""
    engine = Engine(1, SimulatorSettings(seed=4, vehicles=3, bookings_per_hour=120,
                                         duration_s=1800), datetime(2024, 1, 1, 8, tzinfo=UTC))
    engine.advance(300.0)
    readings = iter([0.0, 0.1,  # the first compute takes 0.1 s
                     1.0,  # 0.9 s later: reused
                     5.05,  # 4.95 s after it: still reused
                     6.0, 6.01,  # 5.9 s: computed again, in 0.01 s (reused for 0.5 s)
                     6.2, 6.21,  # an operation ran: computed again
                     6.9, 6.91])  # 0.69 s after it: computed again
    cpu = iter([0.0, 0.1, 0.0, 0.01, 0.0, 0.01, 0.0, 0.01])  # each compute's CPU time
    cache = KpiCache(max_age_s=0.0, monotonic=lambda: next(readings), cpu=lambda: next(cpu))
    first = cache.get(engine, 0, throttle=False)
    engine.advance(600.0)
    assert cache.get(engine, 0, throttle=False) is first
    assert cache.get(engine, 0, throttle=False) is first
    second = cache.get(engine, 0, throttle=False)
    assert second is not first and second == compute(engine)
    third = cache.get(engine, 1, throttle=False)
    assert third is not second
    engine.advance(900.0)
    fourth = cache.get(engine, 1, throttle=False)
    assert fourth is not third and fourth == compute(engine)


def test_kpi_cache_answers_where_an_ended_run_stands() -> None:
    """Reuse by age is for a run under way: once it has ended (or is paused) the KPIs are of
    where it stands, however recently the last ones were computed."""
    engine = Engine(1, SimulatorSettings(seed=4, vehicles=3, bookings_per_hour=120,
                                         duration_s=1800), datetime(2024, 1, 1, 8, tzinfo=UTC))
    engine.advance(300.0)
    readings = iter([0.0, 1.0, 1.1, 1.2, 1.3, 1.4])
    cpu = iter([0.0, 1.0, 0.0, 0.1])  # a slow compute: reused for 50 s running
    cache = KpiCache(max_age_s=1.0, monotonic=lambda: next(readings), cpu=lambda: next(cpu))
    first = cache.get(engine, 0, throttle=True)
    engine.advance(1800.0)
    ended = cache.get(engine, 0, throttle=False, running=False)
    assert ended is not first and ended == compute(engine)
    assert cache.get(engine, 0, throttle=False, running=False) is ended


def test_kpi_cache_does_not_carry_a_replays_kpis_past_the_catch_up() -> None:
    """KPIs computed while a taken-over run replays are reused, as any, while it replays; the
    first KPIs once it has caught up are computed afresh, however recent the replay's are (a
    poller right after a takeover saw them go back to zero: the rolling-restart test)."""
    engine = Engine(1, SimulatorSettings(seed=4, vehicles=3, bookings_per_hour=120,
                                         duration_s=1800), datetime(2024, 1, 1, 8, tzinfo=UTC))
    engine.advance(60.0)
    readings = iter([0.0, 1.0,  # a slow compute: reused for 50 s while the run is under way
                     1.1,  # still replaying: reused
                     1.2, 1.3])  # caught up 0.2 s later: computed again
    cpu = iter([0.0, 1.0, 0.0, 0.1])
    cache = KpiCache(max_age_s=1.0, monotonic=lambda: next(readings), cpu=lambda: next(cpu))
    replaying = cache.get(engine, 0, throttle=False, settled=False)
    engine.advance(300.0)
    assert cache.get(engine, 0, throttle=False, settled=False) is replaying
    engine.advance(900.0)
    caught_up = cache.get(engine, 0, throttle=False)
    assert caught_up is not replaying and caught_up == compute(engine)
    assert caught_up["bookings"] > replaying["bookings"]


def test_kpi_cache_bounds_what_pollers_cost_while_a_paused_run_catches_up() -> None:
    """A run taken over while paused still catches up (its engine moves on each step): its
    KPIs are reused by what they cost, as a running run's, until it has caught up (a status
    poller must not make the catch-up compute KPIs at every step)."""
    engine = Engine(1, SimulatorSettings(seed=4, vehicles=3, bookings_per_hour=120,
                                         duration_s=1800), datetime(2024, 1, 1, 8, tzinfo=UTC))
    engine.advance(60.0)
    readings = iter([0.0, 0.1,  # the compute takes 0.1 s: reused for 5 s
                     1.0,  # replaying, 0.9 s later: reused
                     1.2, 1.3])  # caught up: where the paused run stands
    cpu = iter([0.0, 0.1, 0.0, 0.1])
    cache = KpiCache(max_age_s=0.0, monotonic=lambda: next(readings), cpu=lambda: next(cpu))
    replaying = cache.get(engine, 0, throttle=False, running=False, settled=False)
    engine.advance(600.0)
    assert cache.get(engine, 0, throttle=False, running=False, settled=False) is replaying
    caught_up = cache.get(engine, 0, throttle=False, running=False)
    assert caught_up is not replaying and caught_up == compute(engine)


def test_literature_kpis_follow_their_definitions() -> None:
    from ridecast.simulator.core.model import BookingStatus

    def run(capacity: int) -> tuple[Engine, dict[str, Any]]:
        engine = Engine(1, SimulatorSettings(seed=4, vehicles=6, capacity=capacity,
                                             bookings_per_hour=120, duration_s=1800,
                                             speed="max", network="straight"),
                        datetime(2024, 5, 6, 10, 0, tzinfo=UTC))
        while not engine.finished:
            engine.advance(engine.now + 300.0)
        return engine, compute(engine)

    engine, kpis = run(4)
    served = [b for b in engine.bookings.values() if b.status is BookingStatus.COMPLETED]
    assert kpis["served_share"] == round(len(served) / len(engine.bookings), 4)
    assert 0 < kpis["fleet_utilisation"] <= 1
    assert 0 < kpis["pooling_share"] <= 1
    vkm = sum(v.vehicle_m for v in engine.vehicles.values())
    assert kpis["distance_saved"] == round(sum(b.direct_m for b in served) / vkm, 3)
    hours = len(engine.vehicles) * engine.now / 3600.0
    assert kpis["rides_per_vehicle_hour"] == round(len(served) / hours, 3)
    assert kpis["rebalancing_km"] >= 0
    punctuality = kpis["punctuality"]
    assert punctuality["pickups"] == sum(b.picked_up_t is not None
                                         for b in engine.bookings.values())
    assert 0 <= punctuality["punctual_share"] <= 1
    # One seat: nobody shares a ride.
    _, single = run(1)
    assert single["pooling_share"] == 0


def test_kpi_cache_counts_the_cpu_a_compute_took_not_its_wall_time() -> None:
    """A compute that took 10 s of wall time for 1 ms of CPU (an engine process starved of
    CPU on a loaded machine) is reused for 50 ms, not 500 s: the run's KPIs follow it."""
    engine = Engine(1, SimulatorSettings(seed=4, vehicles=3, bookings_per_hour=120,
                                         duration_s=1800), datetime(2024, 1, 1, 8, tzinfo=UTC))
    engine.advance(300.0)
    readings = iter([0.0, 10.0,  # the compute ends 10 s after it began
                     10.5, 10.6])  # 0.5 s later: computed again
    cpu = iter([0.0, 0.001, 0.0, 0.001])
    cache = KpiCache(max_age_s=0.0, monotonic=lambda: next(readings), cpu=lambda: next(cpu))
    first = cache.get(engine, 0, throttle=False)
    engine.advance(900.0)
    second = cache.get(engine, 0, throttle=False)
    assert second is not first and second["bookings"] > first["bookings"]
