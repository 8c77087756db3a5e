"""The quotas of an organisation, as pure rules: what is refused, with which error.

An organisation's usage (runs, vehicles, simulations, templates, stored event bytes) is
read from the store or from the cluster's counts (``quota_service.py``); these functions
only compare it with the ``QuotaPolicy`` and build the refusal, so they are tested without
a server. ``TokenBucket`` is the events-per-second rule of one organisation and
``ByteLedger`` the stored-bytes count a node checks appends against without waiting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..errors import QuotaExceeded

KINDS = ("runs", "vehicles", "simulations", "templates", "event_bytes", "events_per_s")
"""The ``quota`` label values of ``ridecast_quota_usage``."""

OTHER = "other"
"""The ``organisation`` label of the organisations summed beyond the largest ones."""


@dataclass(frozen=True, slots=True)
class QuotaPolicy:
    """The limits of every organisation (``RIDECAST_QUOTA_*``)."""

    runs: int
    vehicles_per_run: int
    vehicles: int
    events_per_s: float
    simulations: int
    templates: int
    event_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> QuotaPolicy:
        return cls(
            runs=settings.quota_runs_per_org,
            vehicles_per_run=settings.quota_vehicles_per_run,
            vehicles=settings.quota_vehicles_per_org,
            events_per_s=settings.quota_events_per_s_per_org,
            simulations=settings.quota_simulations_per_org,
            templates=settings.quota_templates_per_org,
            event_bytes=settings.quota_event_bytes_per_org,
        )


@dataclass(frozen=True, slots=True)
class RunUsage:
    """An organisation's running and paused runs and their vehicles."""

    runs: int = 0
    vehicles: int = 0


def _refusal(code: str, message: str, **detail: Any) -> QuotaExceeded:
    return QuotaExceeded(message, code=code, details=[{"quota": code, **detail}])


def vehicles_refusal(policy: QuotaPolicy, vehicles: int) -> QuotaExceeded | None:
    """The refusal of a run of ``vehicles`` vehicles on its own, or None."""
    if vehicles > policy.vehicles_per_run:
        return _refusal(
            "quota_vehicles_per_run",
            f"a run may have at most {policy.vehicles_per_run} vehicles, this one {vehicles} "
            "(RIDECAST_QUOTA_VEHICLES_PER_RUN)",
            limit=policy.vehicles_per_run, requested=vehicles)
    return None


def start_refusal(policy: QuotaPolicy, usage: RunUsage, vehicles: int) -> QuotaExceeded | None:
    """The refusal of one more run of ``vehicles`` beside ``usage``, or None."""
    refused = vehicles_refusal(policy, vehicles)
    if refused is not None:
        return refused
    if usage.runs + 1 > policy.runs:
        return _refusal(
            "quota_runs",
            f"your organisation has {usage.runs} running or paused runs, the most it may "
            f"have (RIDECAST_QUOTA_RUNS_PER_ORG={policy.runs})",
            limit=policy.runs, used=usage.runs)
    if usage.vehicles + vehicles > policy.vehicles:
        return _refusal(
            "quota_vehicles",
            f"your organisation's runs have {usage.vehicles} vehicles; {vehicles} more would "
            f"exceed RIDECAST_QUOTA_VEHICLES_PER_ORG={policy.vehicles}",
            limit=policy.vehicles, used=usage.vehicles, requested=vehicles)
    return None


def count_refusal(kind: str, limit: int, count: int) -> QuotaExceeded | None:
    """The refusal of one more simulation or template (``kind``) beside ``count``, or None."""
    if count + 1 > limit:
        noun = kind[:-1]
        return _refusal(
            f"quota_{kind}",
            f"your organisation holds {count} {kind}, the most it may (RIDECAST_QUOTA_"
            f"{kind.upper()}_PER_ORG={limit}); delete one before creating another {noun}",
            limit=limit, used=count)
    return None


def bytes_refusal(limit: int, held: int, adding: int) -> QuotaExceeded | None:
    """The refusal of ``adding`` bytes of events beside ``held``, or None."""
    if held + adding > limit:
        return _refusal(
            "quota_event_bytes",
            f"your organisation's stored events take {held} bytes; {adding} more would "
            f"exceed RIDECAST_QUOTA_EVENT_BYTES_PER_ORG={limit}; nothing was stored",
            limit=limit, used=held, requested=adding)
    return None


@dataclass(slots=True)
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` held; time is given, never read."""

    rate: float
    burst: float
    tokens: float = -1.0
    at: float = 0.0

    def take(self, now: float, want: int) -> tuple[int, float]:
        """Take up to ``want`` tokens: (granted, seconds until one more is there when none
        was granted, else 0)."""
        if self.tokens < 0:  # a new bucket starts full
            self.tokens, self.at = self.burst, now
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        granted = min(want, int(self.tokens))
        if granted < 1:
            return 0, (1 - self.tokens) / self.rate
        self.tokens -= granted
        return granted, 0.0


@dataclass(slots=True)
class ByteLedger:
    """Stored event bytes per organisation as this node knows them: the cluster's total at
    the last exchange (``totals``) plus what this node appended since (``pending``)."""

    totals: dict[int, int] = field(default_factory=dict)
    pending: dict[int, int] = field(default_factory=dict)

    def held(self, org_id: int) -> int:
        return self.totals.get(org_id, 0) + self.pending.get(org_id, 0)

    def add(self, org_id: int, count: int) -> None:
        self.pending[org_id] = self.pending.get(org_id, 0) + count

    def take_pending(self) -> dict[int, int]:
        """What this node appended since the last exchange (then forgotten)."""
        pending, self.pending = self.pending, {}
        return pending

    def give_back(self, pending: Mapping[int, int]) -> None:
        """An exchange failed: count ``pending`` again at the next one."""
        for org_id, count in pending.items():
            self.add(org_id, count)

    def update(self, totals: Mapping[int, int]) -> None:
        """The cluster's totals of these organisations (after this node's pending)."""
        self.totals.update(totals)

    def replace(self, totals: Mapping[int, int]) -> None:
        """A recount from the store: the truth for every organisation."""
        self.totals = dict(totals)


def bounded_labels(usage: Mapping[int, float], most: int) -> dict[str, float]:
    """``usage`` by organisation id, the ``most`` largest by name and the rest summed under
    ``OTHER``, so that a gauge has at most ``most + 1`` series whatever the organisations."""
    ranked = sorted(((value, org) for org, value in usage.items() if value), reverse=True)
    labels = {str(org): value for value, org in ranked[:most]}
    rest = sum(value for value, _ in ranked[most:])
    if rest:
        labels[OTHER] = rest
    return labels
