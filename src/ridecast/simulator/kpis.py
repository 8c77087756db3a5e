"""Key performance indicators of a run, in the terms the ride-pooling literature uses.

- service: bookings, offered, served (dropped off), no_offer (the system's rejections) and its
  rate, offers rejected or expired by riders, no-shows, cancellations;
- level of service: wait (pickup minus request time) mean and p95, ride time over direct
  time (detour factor) mean;
- efficiency: vehicle km, empty km, passenger km, occupancy = passenger-km / vehicle-km;
- the scheduler's wall-clock decision time per booking, p50 and p99 (not part of any event).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .model import BookingStatus, OfferStatus
from .world import World


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
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
    offers = world.offers.values()
    waits = [b.picked_up_t - world.settings.dwell_s - b.requested_t for b in bookings
             if b.picked_up_t is not None]
    detours = [(b.dropped_off_t - b.picked_up_t) / b.direct_s for b in bookings
               if b.dropped_off_t is not None and b.picked_up_t is not None and b.direct_s > 0]
    vehicles = world.vehicles.values()
    vehicle_m = sum(v.vehicle_m for v in vehicles)
    passenger_m = sum(v.passenger_m for v in vehicles)
    decisions = world.decision_ms
    return {
        "bookings": total,
        "offered": len(world.offers),
        "accepted": sum(o.status is OfferStatus.ACCEPTED for o in offers),
        "offers_rejected": sum(o.status is OfferStatus.REJECTED for o in offers),
        "offers_expired": sum(o.status is OfferStatus.EXPIRED for o in offers),
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
        "scheduler_decision_ms_p50": _round(percentile(decisions, 50), 4),
        "scheduler_decision_ms_p99": _round(percentile(decisions, 99), 4),
        "events": sum(world.emitter.counts.values()),
        "events_by_type": dict(sorted(world.emitter.counts.items())),
    }
