"""How a process delivers webhooks: every number the claim, the units and the dispatcher
go by, as one typed object read from the settings (pure: no I/O).

``app.py`` builds one ``DeliveryPolicy`` from ``Settings`` and hands it to the parts; none of
them reads a module constant or the settings object. Figures that explain a default (what
it cost, what it saved) are in docs/performance.md, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..config import Settings
from .retry import quiet_gap


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """The delivery policy of one process; ``from_settings`` documents each field's source.

    Sizes of work: ``unit_rows`` deliveries at most per ordered lane's unit, ``chunk_rows``
    per unordered chunk; a chunk with ``refill_at`` rows left asks for more under its claim
    token, and a unit that has sent ``unit_max_rows`` ends (its slot is planned afresh,
    every lane and URL waiting, the oldest first). A process holds at most
    ``max_in_memory`` claimed deliveries and claims at most ``claim_units`` units a cycle.
    Results are written in batches of ``write_batch`` at most, gathered for
    ``write_interval_s`` when nothing else is due. The backlog gauges' read of every
    delivery still to send takes at most ``maintenance_share`` of a process's time
    (``maintenance_wait_s``).
    """

    per_endpoint: int
    lease_s: float
    timeout_s: float
    poll_interval_s: float
    maintenance_interval_s: float
    retry_schedule_s: Sequence[float]
    retry_jitter: float
    disable_after_s: float
    retention_s: float
    retention_interval_s: float
    unit_rows: int = 64
    chunk_rows: int = 256
    max_in_memory: int = 8192
    body_cache_bytes: int = 32 * 1024 * 1024
    claim_hold_s: float = 2.0
    backlog_metric_sims: int = 100
    maintenance_share: float = 0.05
    write_batch: int = 1000
    write_interval_s: float = 0.01

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryPolicy:
        """The policy the ``RIDECAST_WEBHOOK_*`` settings (and retention's) describe."""
        return cls(
            per_endpoint=settings.webhook_concurrency_per_endpoint,
            lease_s=settings.webhook_lease_s,
            timeout_s=settings.webhook_timeout_s,
            poll_interval_s=settings.webhook_poll_interval_s,
            maintenance_interval_s=settings.webhook_maintenance_interval_s,
            retry_schedule_s=tuple(settings.webhook_retry_schedule_s),
            retry_jitter=settings.webhook_retry_jitter,
            disable_after_s=settings.webhook_disable_after_s,
            retention_s=settings.event_retention_s,
            retention_interval_s=settings.retention_interval_s,
            unit_rows=settings.webhook_unit_rows,
            chunk_rows=settings.webhook_chunk_rows,
            max_in_memory=max(settings.webhook_max_in_memory, settings.webhook_chunk_rows),
            body_cache_bytes=settings.webhook_body_cache_bytes,
            claim_hold_s=settings.webhook_claim_hold_s,
            backlog_metric_sims=settings.webhook_backlog_metric_sims,
        )

    def maintenance_wait_s(self, read_s: float) -> float:
        """The wait before the next refresh of the backlog gauges, whose last read of every
        delivery still to send took ``read_s``: ``maintenance_interval_s``, or longer when
        that read is slow (a backlog of millions), so that it takes no more than
        ``maintenance_share`` of the time however large the backlog grows."""
        return max(self.maintenance_interval_s, read_s / self.maintenance_share)

    @property
    def refill_at(self) -> int:
        """Rows left in a running chunk when it asks for more: half a chunk, so the claim
        that brings more has the time of half a chunk's sends to arrive."""
        return self.chunk_rows // 2

    @property
    def unit_max_rows(self) -> int:
        """Deliveries one unit sends at most before it ends and its slot is planned afresh
        (a long backlog of one URL cannot keep a slot from every other URL for ever)."""
        return 16 * self.chunk_rows

    @property
    def claim_units(self) -> int:
        """Units claimed at most per cycle: as many full chunks as memory allows, up to 64
        (a claim's statement reads a few lanes or URLs per unit)."""
        return max(1, min(64, self.max_in_memory // self.chunk_rows))

    @property
    def send_margin_s(self) -> float:
        """Lease time a send needs beyond its time-out: for a late timer on a busy event loop
        and for clocks that differ between workers. A quarter of what the lease leaves over
        the time-out, at most the time-out (``Settings`` keeps the lease above it)."""
        return min(self.timeout_s, (self.lease_s - self.timeout_s) / 4)

    @property
    def send_lease_s(self) -> float:
        """The lease a request needs left when its bytes are written (checked right before
        the write, ``http11.Pool.post``): its time-out and the margin, so the request has
        ended, answered or timed out, before the lease runs out."""
        return self.timeout_s + self.send_margin_s

    @property
    def renew_at_s(self) -> float:
        """A unit renews its lease when less than this is left, before a send (so the check
        at the write rarely fails) and while its results wait to be written: one margin more
        than a send needs. Below ``lease_s`` whenever the lease exceeds the time-out."""
        return self.send_lease_s + self.send_margin_s

    @property
    def quiet_gap_s(self) -> float:
        """The longest wait between two failures that still counts as one failing streak
        (``retry.quiet_gap``)."""
        return quiet_gap(self.retry_schedule_s, jitter=self.retry_jitter,
                         timeout_s=self.timeout_s, lease_s=self.lease_s)


__all__ = ["DeliveryPolicy"]
