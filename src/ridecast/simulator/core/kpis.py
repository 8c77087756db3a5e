"""Key performance indicators of a run, in the terms the ride-pooling literature uses.

The top-level keys (which the dashboard reads) cover the whole run so far:

- service: bookings, offered, served (dropped off), no_offer (the system's rejections) and its
  rate, offers rejected or expired by riders, no-shows, cancellations;
- level of service: wait (pickup minus request time) mean and p95, ride time over direct
  time (detour factor) mean;
- efficiency: vehicle km, empty km, passenger km, occupancy = passenger-km / vehicle-km;
- the scheduler's wall-clock decision time per booking, p50 and p99 (not part of any event);
- the ride-pooling literature's indicators (``literature``): served share, fleet utilisation
  (share of vehicle time with stops to make), pooling share (served riders who shared any
  part of their ride), distance saved (direct km of served riders / vehicle-km), rides per
  vehicle-hour, punctuality (actual pickup minus the offered pickup time) and rebalancing km;
  the same names appear at the top level too, so that the dashboard lists them.

``measured`` holds the same quantities after the warm-up (``kpi_warmup_s``): bookings
requested from then on, and driving done from then on, with the window stated; see
``docs/simulator.md`` for each definition.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from .model import BookingStatus, OfferStatus
from .world import World

# A run spends at most about 1/KPI_COST_SHARE of its wall time on KPIs for pollers.
KPI_COST_SHARE = 50


class KpiCache:
    """The last KPIs of one run, and what they were computed from.

    ``compute`` walks every booking and vehicle (and the leg each moving vehicle is on), so
    a status request should not pay it when nothing changed: the value is reused while the
    world's time, its event count and the run's count of operations are the same. While the
    run is under way, unless an operation ran since, it is also reused

    - for ``KPI_COST_SHARE`` times as long as it took to compute: pollers, however many and
      however often, cost the run at most ``1 / KPI_COST_SHARE`` of its time;
    - with ``throttle`` (a run going as fast as it can, whose time moves on every step), for
      at least ``max_age_s`` of wall time.

    A value computed while a taken-over run replays its journal (``settled`` false) is never
    reused once the run has caught up: it describes a moment the run has left, as far back as
    its start, and a poller right after the catch-up would see the KPIs go back to zero.
    """

    def __init__(self, max_age_s: float = 1.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self._monotonic = monotonic
        self._key: tuple[float, int, int, bool] | None = None
        self._at = -math.inf
        self._reuse_s = 0.0  # KPI_COST_SHARE times the last compute's duration
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
            if key == self._key or (running and (
                    age < self._reuse_s or (throttle and age < self.max_age_s))):
                return self._value
        value = compute(world)
        done = self._monotonic()
        self._key, self._at, self._value = key, done, value
        self._reuse_s = (done - now) * KPI_COST_SHARE
        return value


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def _sorted_percentile(ordered: Sequence[float], q: float) -> float | None:
    """``percentile`` of values already in order (one sort serves several percentiles)."""
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def compute(world: World) -> dict[str, Any]:
    """The KPIs of ``world`` so far (cheap enough to answer every status request)."""
    bookings = world.bookings.values()
    statuses = [b.status for b in bookings]
    total = len(statuses)
    no_offer = statuses.count(BookingStatus.NO_OFFER)
    offer_statuses = Counter(o.status for o in world.offers.values())
    waits = [b.picked_up_t - world.settings.dwell_s - b.requested_t for b in bookings
             if b.picked_up_t is not None]
    detours = [(b.dropped_off_t - b.picked_up_t) / b.direct_s for b in bookings
               if b.dropped_off_t is not None and b.picked_up_t is not None and b.direct_s > 0]
    vehicles = world.vehicles.values()
    vehicle_m = sum(v.vehicle_m for v in vehicles)
    passenger_m = sum(v.passenger_m for v in vehicles)
    decisions = sorted(world.decision_ms)
    lit = literature(world)
    return {
        "bookings": total,
        "offered": len(world.offers),
        "accepted": offer_statuses[OfferStatus.ACCEPTED],
        "offers_rejected": offer_statuses[OfferStatus.REJECTED],
        "offers_expired": offer_statuses[OfferStatus.EXPIRED],
        "served": statuses.count(BookingStatus.COMPLETED),
        "on_board": statuses.count(BookingStatus.PICKED_UP),
        "no_offer": no_offer,
        "rejected_rate": _round(no_offer / total if total else None, 4),
        "no_shows": statuses.count(BookingStatus.NO_SHOW),
        "cancellations": statuses.count(BookingStatus.CANCELLED),
        "wait_mean_s": _round(sum(waits) / len(waits) if waits else None, 1),
        "wait_p95_s": _round(percentile(waits, 95), 1),
        "ride_over_direct_mean": _round(sum(detours) / len(detours) if detours else None),
        "vehicle_km": round(vehicle_m / 1000.0, 3),
        "empty_km": round(sum(v.empty_m for v in vehicles) / 1000.0, 3),
        "passenger_km": round(passenger_m / 1000.0, 3),
        "occupancy": _round(passenger_m / vehicle_m if vehicle_m else None),
        "vehicles": len(world.vehicles),
        "vehicles_enabled": sum(v.enabled for v in vehicles),
        "scheduler_decisions": len(decisions),
        "scheduler_decision_ms_p50": _round(_sorted_percentile(decisions, 50), 4),
        "scheduler_decision_ms_p99": _round(_sorted_percentile(decisions, 99), 4),
        "events": sum(world.emitter.counts.values()),
        "events_by_type": dict(sorted(world.emitter.counts.items())),
        "measured": measured(world),
        **{k: v for k, v in lit.items() if not isinstance(v, dict)},
        "punctuality": lit["punctuality"],
    }


#: A pickup this close to the offered time (either way) counts as punctual.
PUNCTUAL_S = 60.0


def literature(world: World) -> dict[str, Any]:
    """The indicators of the ride-pooling literature over the run so far (module
    docstring); None where nothing is there to divide by yet."""
    now = world.now
    bookings = world.bookings.values()
    total = len(world.bookings)
    served = [b for b in bookings if b.status is BookingStatus.COMPLETED]
    vehicles = world.vehicles.values()
    vehicle_m = sum(v.vehicle_m for v in vehicles)
    busy = sum(v.busy_s + (now - v.busy_since if v.busy_since is not None else 0.0)
               for v in vehicles)
    fleet_s = len(world.vehicles) * now
    dwell = world.settings.dwell_s
    late: list[float] = []
    for b in bookings:
        if b.picked_up_t is not None and b.offer_id is not None:
            late.append(b.picked_up_t - dwell - world.offers[b.offer_id].estimated_pickup_t)
    ordered = sorted(late)
    return {
        "served_share": _round(len(served) / total if total else None, 4),
        "fleet_utilisation": _round(busy / fleet_s if fleet_s > 0 else None, 4),
        "pooling_share": _round(sum(b.shared for b in served) / len(served)
                                if served else None, 4),
        "distance_saved": _round(sum(b.direct_m for b in served) / vehicle_m
                                 if vehicle_m else None),
        "rides_per_vehicle_hour": _round(len(served) / (fleet_s / 3600.0)
                                         if fleet_s > 0 else None),
        "rebalancing_km": round(sum(v.rebalance_m for v in vehicles) / 1000.0, 3),
        "punctuality": {
            "pickups": len(late),
            "late_mean_s": _round(sum(late) / len(late) if late else None, 1),
            "late_p95_s": _round(_sorted_percentile(ordered, 95), 1),
            "punctual_share": _round(sum(abs(x) <= PUNCTUAL_S for x in late) / len(late)
                                     if late else None, 4),
            "window_s": PUNCTUAL_S,
        },
    }


def _stats(values: Sequence[float], digits: int = 1) -> dict[str, float | None]:
    ordered = sorted(values)
    return {"mean": _round(sum(values) / len(values) if values else None, digits),
            "p50": _round(_sorted_percentile(ordered, 50), digits),
            "p95": _round(_sorted_percentile(ordered, 95), digits)}


def measured(world: World) -> dict[str, Any]:
    """The KPIs after the warm-up: bookings requested at or after it, driving after it."""
    warmup = world.settings.kpi_warmup_s
    started = world.now >= warmup
    window = {"warmup_s": warmup, "from_s": warmup, "to_s": round(world.now, 3),
              "started": started}
    bookings = [b for b in world.bookings.values() if b.requested_t >= warmup]
    dwell = world.settings.dwell_s
    offers = world.offers
    total = len(bookings)
    statuses = Counter(b.status for b in bookings)
    reasons = Counter(b.cancel_reason for b in bookings)
    # No offer, or cancelled for want of a vehicle (counted once if both).
    no_vehicle = statuses[BookingStatus.NO_OFFER]
    if reasons["no_vehicle"]:
        no_vehicle += sum(b.status is not BookingStatus.NO_OFFER for b in bookings
                          if b.cancel_reason == "no_vehicle")
    answered = [offers[b.offer_id].status for b in bookings if b.offer_id is not None]
    rider_rejected = answered.count(OfferStatus.REJECTED)
    expired = answered.count(OfferStatus.EXPIRED)
    picked = [b for b in bookings if b.picked_up_t is not None]
    waits = [b.picked_up_t - dwell - b.requested_t for b in picked
             if b.picked_up_t is not None]
    done = [b for b in picked if b.dropped_off_t is not None and b.picked_up_t is not None]
    rides = [b.dropped_off_t - b.picked_up_t for b in done
             if b.dropped_off_t is not None and b.picked_up_t is not None]
    detours = [ride / b.direct_s for ride, b in zip(rides, done, strict=True) if b.direct_s > 0]
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
