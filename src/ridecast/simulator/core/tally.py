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
import sys
from collections import Counter
from collections.abc import Iterable, Sequence

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


PENDING = 1024
"""Values a ``Sample`` holds as they came before it folds them into its sums and histogram."""


class Sample:
    """Values seen: how many, their exact sum, and (``digits`` or ``significant`` given)
    how many fell on each value rounded to that many decimals or significant digits.

    A value added is kept as it is until ``PENDING`` of them are (adding is an append:
    ``kpis.compute`` adds the bookings the engine holds to a copy at every call), then
    folded in: the sample's size is set by the range of its values, not by their number.
    """

    __slots__ = ("digits", "folded", "hist", "partials", "pending", "significant", "values")

    def __init__(self, digits: int | None = None, significant: int | None = None) -> None:
        self.digits = digits
        self.significant = significant
        self.folded = 0
        self.partials: list[float] = []
        self.hist: Counter[float] = Counter()
        self.values: list[float] = []
        self.pending = PENDING

    def _keys(self, values: list[float]) -> list[float]:
        if self.digits is not None:
            digits = self.digits
            return [round(x, digits) for x in values]
        if self.significant is not None:
            form = f".{self.significant}g"
            return [float(format(x, form)) for x in values]
        return []

    def add(self, x: float) -> None:
        self.values.append(x)
        if len(self.values) >= self.pending:
            self.fold()

    def extend(self, values: Iterable[float]) -> None:
        self.values.extend(values)
        if len(self.values) >= self.pending:
            self.fold()

    def fold(self) -> None:
        """Fold the values kept as they came into the sums and the histogram."""
        values = self.values
        for x in values:
            _add_exact(self.partials, x)
        self.hist.update(self._keys(values))
        self.folded += len(values)
        self.values = []

    @property
    def count(self) -> int:
        return self.folded + len(self.values)

    @property
    def sum(self) -> float:
        return math.fsum(self.partials + self.values)

    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def percentile(self, q: float) -> float | None:
        """Nearest-rank percentile (``q`` in [0, 100]) of the rounded values."""
        count = self.count
        if not count:
            return None
        hist = self.hist
        if self.values:
            hist = Counter(hist)
            hist.update(self._keys(self.values))
        rank = max(1, math.ceil(q / 100.0 * count))
        seen = 0
        for key in sorted(hist):
            seen += hist[key]
            if seen >= rank:
                return key
        raise AssertionError("a sample's histogram holds its count")  # pragma: no cover

    def copy(self, *, to_read: bool = False) -> Sample:
        """A copy; ``to_read``: one that is added to and read once (it never folds: a
        read merges its values as they are)."""
        other = Sample(self.digits, self.significant)
        other.folded = self.folded
        other.partials = list(self.partials)
        other.hist = Counter(self.hist)
        other.values = list(self.values)
        if to_read:
            other.pending = sys.maxsize
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

    def add(self, pairs: Sequence[tuple[Booking, Offer | None]], dwell_s: float) -> None:
        """Count bookings in, each with its offer (a pass per figure: ``kpis.compute`` adds
        every booking the engine holds at each call)."""
        completed, no_offer = BookingStatus.COMPLETED, BookingStatus.NO_OFFER
        self.requests += len(pairs)
        self.statuses.update([b.status for b, _ in pairs])
        self.reasons.update([b.cancel_reason for b, _ in pairs])
        self.no_vehicle_cancelled += sum(b.cancel_reason == "no_vehicle"
                                         and b.status is not no_offer for b, _ in pairs)
        self.offers.update([o.status for _, o in pairs if o is not None])
        picked = [(b, b.picked_up_t, o) for b, o in pairs if b.picked_up_t is not None]
        self.waits.extend([at - dwell_s - b.requested_t for b, at, _ in picked])
        late = [at - dwell_s - o.estimated_pickup_t for _, at, o in picked if o is not None]
        self.late.extend(late)
        self.punctual += sum(abs(x) <= PUNCTUAL_S for x in late)
        done = [(b, b.dropped_off_t - at) for b, at, _ in picked if b.dropped_off_t is not None]
        self.rides.extend([ride for _, ride in done])
        self.detours.extend([ride / b.direct_s for b, ride in done if b.direct_s > 0])
        served = [b for b, _ in pairs if b.status is completed]
        self.shared += sum(b.shared for b in served)
        self.direct_m.extend([b.direct_m for b in served])

    def copy(self, *, to_read: bool = False) -> Part:
        other = Part()
        other.requests = self.requests
        other.statuses = Counter(self.statuses)
        other.reasons = Counter(self.reasons)
        other.no_vehicle_cancelled = self.no_vehicle_cancelled
        other.offers = Counter(self.offers)
        for name in ("waits", "rides", "detours", "late", "direct_m"):
            setattr(other, name, getattr(self, name).copy(to_read=to_read))
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

    def add(self, pairs: Sequence[tuple[Booking, Offer | None]]) -> None:
        """Count bookings in, each with its offer."""
        self.offers.update([o.status for _, o in pairs if o is not None])
        self.run.add(pairs, self.dwell_s)
        warmup = self.warmup_s
        self.measured.add([(b, o) for b, o in pairs if b.requested_t >= warmup], self.dwell_s)

    def copy(self, *, to_read: bool = False) -> Tally:
        """A copy; ``to_read``: see ``Sample.copy``."""
        other = Tally(self.dwell_s, self.warmup_s)
        other.run = self.run.copy(to_read=to_read)
        other.measured = self.measured.copy(to_read=to_read)
        other.offers = Counter(self.offers)
        return other
