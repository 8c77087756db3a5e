"""How a run waits between attempts at a store write that failed: back-off as data.

A run's writes (its events, a journal entry, its lease) fail while the store does not
answer: a restarted database, a dropped connection, a saturated event log. They are tried
again after a delay that doubles from ``first_s`` up to ``max_s``, with jitter so that the
runs of a node do not all retry at once, for as long as the caller allows (its lease holds).
Pure.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from ...errors import ServiceUnavailable


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts: ``first_s``, doubling to ``max_s``, each x [0.5, 1]."""

    first_s: float = 0.05
    max_s: float = 2.0

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        draw = (rng or random.Random()).random
        delay = self.first_s
        while True:
            yield delay * (0.5 + 0.5 * draw())
            delay = min(self.max_s, delay * 2)


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a store fault that may pass (the store answers 503, or the
    connection to it broke), rather than a refusal that will not change."""
    return isinstance(exc, ServiceUnavailable | ConnectionError | TimeoutError | OSError)
