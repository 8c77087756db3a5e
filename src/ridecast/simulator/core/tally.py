"""What the KPIs keep of the bookings an engine no longer holds, in a size set by the settings.

A booking that has ended (served, no-show, cancelled, refused or without an offer) stays in
the engine for a while (``World.keep_finished_s``: rebalancing reads the requests of its
window, operators may still name it), then is retired: its part of every KPI goes into a
``Tally`` and the booking, its offer and its nodes are dropped. ``kpis.compute`` adds the
bookings still held to a copy of the tally, so the KPIs are those of every booking of the
run while the engine's state, and its snapshot, stay the size of the bookings under way.

The tally keeps what the KPIs report, exactly: counts, sums (exact: ``Sample`` keeps
Shewchuk's partial sums, so a mean does not depend on the order bookings were added) and,
for the percentiles, how many values fell on each value the KPI is rounded to. The KPIs'
percentiles are nearest-rank and rounding is monotonic, so the percentile of the rounded
values is the rounded percentile: the same figure as from every value. Those histograms are
bounded by the range of the values (waits up to the longest wait, detours, rides), not by
how many bookings there were. Pure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from .model import Booking, BookingStatus, Offer, OfferStatus

ENDED = frozenset({BookingStatus.COMPLETED, BookingStatus.NO_SHOW, BookingStatus.CANCELLED,
                   BookingStatus.NO_OFFER, BookingStatus.REJECTED})
"""A booking in these states has ended: nothing changes it any more."""

#: A pickup this close to the offered time (either way) counts as punctual.
PUNCTUAL_S = 60.0


def _add_exact(partials: list[float], x: float) -> None:
    """Add ``x`` to the non-overlapping partial sums (``math.fsum``'s algorithm)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


class Sample:
    """Values seen: how many, their exact sum, and (``digits`` or ``significant`` given)
    how many fell on each value rounded to that many decimals or significant digits."""

    __slots__ = ("count", "digits", "hist", "partials", "significant")

    def __init__(self, digits: int | None = None, significant: int | None = None) -> None:
        self.digits = digits
        self.significant = significant
        self.count = 0
        self.partials: list[float] = []
        self.hist: Counter[float] = Counter()

    def key(self, x: float) -> float | None:
        if self.digits is not None:
            return round(x, self.digits)
        if self.significant is not None:
            return float(f"{x:.{self.significant}g}")
        return None

    def add(self, x: float) -> None:
        self.count += 1
        _add_exact(self.partials, x)
        key = self.key(x)
        if key is not None:
            self.hist[key] += 1

    def extend(self, values: Iterable[float]) -> None:
        for x in values:
            self.add(x)

    @property
    def sum(self) -> float:
        return math.fsum(self.partials)

    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def percentile(self, q: float) -> float | None:
        """Nearest-rank percentile (``q`` in [0, 100]) of the rounded values."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q / 100.0 * self.count))
        seen = 0
        for key in sorted(self.hist):
            seen += self.hist[key]
            if seen >= rank:
                return key
        raise AssertionError("a sample's histogram holds its count")  # pragma: no cover

    def copy(self) -> Sample:
        other = Sample(self.digits, self.significant)
        other.count = self.count
        other.partials = list(self.partials)
        other.hist = Counter(self.hist)
        return other


class Part:
    """The KPIs' figures of a set of bookings (the whole run, or those after the warm-up)."""

    __slots__ = ("detours", "direct_m", "late", "no_vehicle_cancelled", "offers", "punctual",
                 "reasons", "requests", "rides", "shared", "statuses", "waits")

    def __init__(self) -> None:
        self.requests = 0
        self.statuses: Counter[BookingStatus] = Counter()
        self.reasons: Counter[str | None] = Counter()
        # Cancelled for want of a vehicle without being a no_offer.
        self.no_vehicle_cancelled = 0
        # The status of each booking's offer (a booking has at most one).
        self.offers: Counter[OfferStatus] = Counter()
        self.waits = Sample(digits=1)
        self.rides = Sample(digits=1)
        self.detours = Sample(digits=3)
        self.late = Sample(digits=1)
        self.punctual = 0
        self.shared = 0  # served bookings that shared part of their ride
        self.direct_m = Sample()  # of served bookings

    def add(self, booking: Booking, offer: Offer | None, dwell_s: float) -> None:
        b = booking
        self.requests += 1
        self.statuses[b.status] += 1
        self.reasons[b.cancel_reason] += 1
        if b.cancel_reason == "no_vehicle" and b.status is not BookingStatus.NO_OFFER:
            self.no_vehicle_cancelled += 1
        if offer is not None:
            self.offers[offer.status] += 1
        if b.picked_up_t is not None:
            self.waits.add(b.picked_up_t - dwell_s - b.requested_t)
            if offer is not None:
                late = b.picked_up_t - dwell_s - offer.estimated_pickup_t
                self.late.add(late)
                self.punctual += abs(late) <= PUNCTUAL_S
            if b.dropped_off_t is not None:
                ride = b.dropped_off_t - b.picked_up_t
                self.rides.add(ride)
                if b.direct_s > 0:
                    self.detours.add(ride / b.direct_s)
        if b.status is BookingStatus.COMPLETED:
            self.shared += b.shared
            self.direct_m.add(b.direct_m)

    def copy(self) -> Part:
        other = Part()
        other.requests = self.requests
        other.statuses = Counter(self.statuses)
        other.reasons = Counter(self.reasons)
        other.no_vehicle_cancelled = self.no_vehicle_cancelled
        other.offers = Counter(self.offers)
        for name in ("waits", "rides", "detours", "late", "direct_m"):
            setattr(other, name, getattr(self, name).copy())
        other.punctual = self.punctual
        other.shared = self.shared
        return other


class Tally:
    """The retired bookings' share of the KPIs: the whole run's and the warm-up's."""

    __slots__ = ("dwell_s", "measured", "offers", "run", "warmup_s")

    def __init__(self, dwell_s: float, warmup_s: float) -> None:
        self.dwell_s = dwell_s
        self.warmup_s = warmup_s
        self.run = Part()
        self.measured = Part()  # bookings requested at or after the warm-up
        # Offers by status (every offer belongs to a booking, retired with it).
        self.offers: Counter[OfferStatus] = Counter()

    def add(self, booking: Booking, offer: Offer | None) -> None:
        """Count one booking (and its offer) in."""
        if offer is not None:
            self.offers[offer.status] += 1
        self.run.add(booking, offer, self.dwell_s)
        if booking.requested_t >= self.warmup_s:
            self.measured.add(booking, offer, self.dwell_s)

    def copy(self) -> Tally:
        other = Tally(self.dwell_s, self.warmup_s)
        other.run = self.run.copy()
        other.measured = self.measured.copy()
        other.offers = Counter(self.offers)
        return other
