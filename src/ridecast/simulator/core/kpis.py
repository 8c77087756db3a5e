"""Key performance indicators of a run, in the terms the ride-pooling literature uses.

The top-level keys (which the dashboard reads) cover the whole run so far:

- service: bookings, offered, served (dropped off), no_offer (the system's rejections) and its
  rate, offers rejected or expired by riders, no-shows, cancellations;
- level of service: wait (pickup minus request time) mean and p95, ride time over direct
  time (detour factor) mean;
- efficiency: vehicle km, empty km, passenger km, occupancy = passenger-km / vehicle-km;
- the scheduler's wall-clock decision time per booking, p50 and p99 to three significant
  digits (not part of any event);
- the ride-pooling literature's indicators (``literature``): served share, fleet utilisation
  (share of vehicle time with stops to make), pooling share (served riders who shared any
  part of their ride), distance saved (direct km of served riders / vehicle-km), rides per
  vehicle-hour, punctuality (actual pickup minus the offered pickup time) and rebalancing km;
  the same names appear at the top level too, so that the dashboard lists them.

``measured`` holds the same quantities after the warm-up (``kpi_warmup_s``): bookings
requested from then on, and driving done from then on, with the window stated; see
``docs/simulator.md`` for each definition.

Every figure covers every booking of the run: those the engine still holds are walked, those
it has retired (tally.py) are read from their tally, with the same result.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from .model import BookingStatus, OfferStatus
from .tally import PUNCTUAL_S, Sample, Tally
from .world import World

# A run spends at most about 1/KPI_COST_SHARE of its CPU time on KPIs for pollers.
KPI_COST_SHARE = 50


class KpiCache:
    """The last KPIs of one run, and what they were computed from.

    ``compute`` walks the bookings the engine holds and every vehicle (and the leg each
    moving vehicle is on), so a status request should not pay it when nothing changed: the
    value is reused while the world's time, its event count and the run's count of
    operations are the same. While the run is under way, or catching up after a takeover
    (``settled`` false; paused too: its engine still moves), unless an operation ran since,
    it is also reused

    - for ``KPI_COST_SHARE`` times the CPU time it took to compute: pollers, however many
      and however often, cost the run at most ``1 / KPI_COST_SHARE`` of its CPU. Its CPU
      time, not the wall time it took: an engine process starved of CPU on a loaded
      machine can take seconds of wall time for milliseconds of work, and its KPIs would
      stand still while the run goes on;
    - with ``throttle`` (a run going as fast as it can, whose time moves on every step), for
      at least ``max_age_s`` of wall time.

    A value computed while a taken-over run replays its journal (``settled`` false) is never
    reused once the run has caught up: it describes a moment the run has left, as far back as
    its start, and a poller right after the catch-up would see the KPIs go back to zero.
    """

    def __init__(self, max_age_s: float = 1.0,
                 monotonic: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self.max_age_s = max_age_s
        self._monotonic = monotonic
        self._cpu = cpu
        self._key: tuple[float, int, int, bool] | None = None
        self._at = -math.inf
        self._reuse_s = 0.0  # KPI_COST_SHARE times the last compute's CPU time
        self._value: dict[str, Any] = {}

    def get(self, world: World, operations: int, *, throttle: bool,
            running: bool = True, settled: bool = True) -> dict[str, Any]:
        """The KPIs; ``running``: the run is under way (a run that ended or is paused gets
        KPIs of where it stands, recomputed once); ``settled``: false while a taken-over run
        catches up."""
        key = (world.now, sum(world.emitter.counts.values()), operations, settled)
        now = self._monotonic()
        if self._key is not None and key[2:] == self._key[2:]:
            age = now - self._at
            if key == self._key or ((running or not settled) and (
                    age < self._reuse_s or (throttle and age < self.max_age_s))):
                return self._value
        cpu = self._cpu()
        value = compute(world)
        cost = self._cpu() - cpu
        self._key, self._at, self._value = key, self._monotonic(), value
        self._reuse_s = cost * KPI_COST_SHARE
        return value


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _bookings(world: World) -> Tally:
    """The retired bookings' tally with the bookings the world still holds added: every
    booking of the run (tally.py)."""
    tally = world.tally.copy(to_read=True)
    offers = world.offers
    tally.add([(b, offers.get(b.offer_id) if b.offer_id is not None else None)
               for b in world.bookings.values()])
    return tally


def compute(world: World) -> dict[str, Any]:
    """The KPIs of ``world`` so far (cheap enough to answer every status request: the
    bookings ended long ago are a tally, not walked)."""
    tally = _bookings(world)
    run = tally.run
    statuses = run.statuses
    total = run.requests
    no_offer = statuses[BookingStatus.NO_OFFER]
    offer_statuses = tally.offers
    waits, detours = run.waits, run.detours
    vehicles = world.vehicles.values()
    vehicle_m = sum(v.vehicle_m for v in vehicles)
    passenger_m = sum(v.passenger_m for v in vehicles)
    decisions = world.decisions
    lit = literature(world, tally)
    return {
        "bookings": total,
        "offered": sum(offer_statuses.values()),
        "accepted": offer_statuses[OfferStatus.ACCEPTED],
        "offers_rejected": offer_statuses[OfferStatus.REJECTED],
        "offers_expired": offer_statuses[OfferStatus.EXPIRED],
        "served": statuses[BookingStatus.COMPLETED],
        "on_board": statuses[BookingStatus.PICKED_UP],
        "no_offer": no_offer,
        "rejected_rate": _round(no_offer / total if total else None, 4),
        "no_shows": statuses[BookingStatus.NO_SHOW],
        "cancellations": statuses[BookingStatus.CANCELLED],
        "wait_mean_s": _round(waits.mean(), 1),
        "wait_p95_s": _round(waits.percentile(95), 1),
        "ride_over_direct_mean": _round(detours.mean()),
        "vehicle_km": round(vehicle_m / 1000.0, 3),
        "empty_km": round(sum(v.empty_m for v in vehicles) / 1000.0, 3),
        "passenger_km": round(passenger_m / 1000.0, 3),
        "occupancy": _round(passenger_m / vehicle_m if vehicle_m else None),
        "vehicles": len(world.vehicles),
        "vehicles_enabled": sum(v.enabled for v in vehicles),
        "scheduler_decisions": decisions.count,
        "scheduler_decision_ms_p50": _round(decisions.percentile(50), 4),
        "scheduler_decision_ms_p99": _round(decisions.percentile(99), 4),
        "events": sum(world.emitter.counts.values()),
        "events_by_type": dict(sorted(world.emitter.counts.items())),
        "measured": measured(world, tally),
        **{k: v for k, v in lit.items() if not isinstance(v, dict)},
        "punctuality": lit["punctuality"],
    }


def literature(world: World, tally: Tally | None = None) -> dict[str, Any]:
    """The indicators of the ride-pooling literature over the run so far (module
    docstring); None where nothing is there to divide by yet. ``tally``: every booking's
    (``_bookings``), when the caller has it already."""
    run = (tally or _bookings(world)).run
    now = world.now
    total = run.requests
    served = run.statuses[BookingStatus.COMPLETED]
    vehicles = world.vehicles.values()
    vehicle_m = sum(v.vehicle_m for v in vehicles)
    busy = sum(v.busy_s + (now - v.busy_since if v.busy_since is not None else 0.0)
               for v in vehicles)
    fleet_s = len(world.vehicles) * now
    late = run.late
    return {
        "served_share": _round(served / total if total else None, 4),
        "fleet_utilisation": _round(busy / fleet_s if fleet_s > 0 else None, 4),
        "pooling_share": _round(run.shared / served if served else None, 4),
        "distance_saved": _round(run.direct_m.sum / vehicle_m if vehicle_m else None),
        "rides_per_vehicle_hour": _round(served / (fleet_s / 3600.0)
                                         if fleet_s > 0 else None),
        "rebalancing_km": round(sum(v.rebalance_m for v in vehicles) / 1000.0, 3),
        "punctuality": {
            "pickups": late.count,
            "late_mean_s": _round(late.mean(), 1),
            "late_p95_s": _round(late.percentile(95), 1),
            "punctual_share": _round(run.punctual / late.count if late.count else None, 4),
            "window_s": PUNCTUAL_S,
        },
    }


def _stats(values: Sample, digits: int = 1) -> dict[str, float | None]:
    return {"mean": _round(values.mean(), digits),
            "p50": _round(values.percentile(50), digits),
            "p95": _round(values.percentile(95), digits)}


def measured(world: World, tally: Tally | None = None) -> dict[str, Any]:
    """The KPIs after the warm-up: bookings requested at or after it, driving after it."""
    warmup = world.settings.kpi_warmup_s
    started = world.now >= warmup
    window = {"warmup_s": warmup, "from_s": warmup, "to_s": round(world.now, 3),
              "started": started}
    part = (tally or _bookings(world)).measured
    total = part.requests
    statuses = part.statuses
    reasons = part.reasons
    # No offer, or cancelled for want of a vehicle (counted once if both).
    no_vehicle = statuses[BookingStatus.NO_OFFER] + part.no_vehicle_cancelled
    rider_rejected = part.offers[OfferStatus.REJECTED]
    expired = part.offers[OfferStatus.EXPIRED]
    waits, rides, detours = part.waits, part.rides, part.detours
    vm = em = pm = 0.0
    if started:
        base = world.warmup_m or {}
        for vid, vehicle in world.vehicles.items():
            now_vm, now_em, now_pm = world.driven_m(vehicle)
            b_vm, b_em, b_pm = base.get(vid, (0.0, 0.0, 0.0))
            vm += now_vm - b_vm
            em += now_em - b_em
            pm += now_pm - b_pm
    rejections = no_vehicle + rider_rejected + expired
    return {
        "window": window,
        "requests": total,
        "served": statuses[BookingStatus.COMPLETED],
        "rejections": {
            "no_vehicle": no_vehicle,
            "rider_rejected": rider_rejected,
            "expired": expired,
            "rate": _round(rejections / total if total else None, 4),
        },
        "no_shows": statuses[BookingStatus.NO_SHOW],
        "cancelled_by_rider": reasons["rider"],
        "wait_s": _stats(waits),
        "ride_s": _stats(rides),
        "detour": _stats(detours, 3),
        "vehicle_km": round(vm / 1000.0, 3),
        "vehicle_km_empty": round(em / 1000.0, 3),
        "vehicle_km_occupied": round((vm - em) / 1000.0, 3),
        "passenger_km": round(pm / 1000.0, 3),
        "empty_share": _round(em / vm if vm else None, 4),
        "occupancy": _round(pm / vm if vm else None),
        "occupancy_when_occupied": _round(pm / (vm - em) if vm - em > 0 else None),
    }
