"""Results written apart when their batch fails: one refused row fails only itself.

The dispatcher writes the results of many deliveries, of every organisation, in one
transaction with its next claim. When the store refuses a row of them (a constraint, a
trigger, a value it cannot keep: ``store/refusal.py``), the whole transaction fails, and
retrying it as it was would fail the same way forever: no result of anyone would be
recorded and every delivery would be sent again after its lease. So the batch is written
again without the claim, in halves down to single results; a result the store refuses
alone is given up (its row stays leased and is sent again once the lease runs out, the
fate of a result never recorded), and every other one is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from ..errors import ServiceUnavailable
from ..store.refusal import refuses_row
from .jobs import Result

log = logging.getLogger(__name__)


@dataclass
class Apart:
    """What ``record_apart`` did with each result of a batch."""

    written: list[Result] = field(default_factory=list)
    refused: list[Result] = field(default_factory=list)
    """Refused by the store alone: given up."""
    pending: list[Result] = field(default_factory=list)
    """Not written because the store went away meanwhile: to be written later."""


async def record_apart(record: Callable[[Sequence[Result]], Awaitable[None]],
                       batch: Sequence[Result]) -> Apart:
    """Write ``batch`` with ``record`` (one transaction per call), halving a part that
    fails until the results the store refuses are alone (see the module docstring)."""
    apart = Apart()
    await _write(record, list(batch), apart)
    return apart


async def _write(record: Callable[[Sequence[Result]], Awaitable[None]],
                 part: list[Result], apart: Apart) -> None:
    if apart.pending:  # the store went away: what is left waits for it
        apart.pending.extend(part)
        return
    try:
        await record(part)
    except Exception as exc:
        if isinstance(exc, ServiceUnavailable) or not refuses_row(exc):
            apart.pending.extend(part)  # not this part's fault: written later, whole
            return
        if len(part) == 1:
            log.error("the store refused the result of webhook delivery %d (%s: %s); it "
                      "is sent again when its lease runs out", part[0].delivery_id,
                      type(exc).__name__, str(exc)[:300])
            apart.refused.extend(part)
            return
        half = len(part) // 2
        await _write(record, part[:half], apart)
        await _write(record, part[half:], apart)
        return
    apart.written.extend(part)


__all__ = ["Apart", "record_apart", "refuses_row"]
