"""The garbage collector of a long-running server process, tuned once at start.

A server allocates a great many short-lived objects (requests, events, the simulator's
tuples and dicts), almost all freed by reference counting; CPython's default thresholds
still run a young collection every 700 net allocations and, every hundred of those, walk
everything alive, which costs a busy server a large share of its CPU.

``tune()`` moves what start-up created (modules, the app, the road network) out of the
collector's sight (``gc.freeze``), and lets the youngest generation grow to
``YOUNG_THRESHOLD`` objects before a collection. Cycles are still collected, later: at most
that many objects wait for it.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
"""Allocations (net of frees) between young collections; CPython's default is 700."""

OLDER_THRESHOLDS = (20, 20)
"""Collections of one generation between collections of the next (default 10, 10)."""


def tune() -> None:
    """Freeze what exists now and raise the thresholds (call once, after start-up)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
