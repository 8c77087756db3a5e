"""Independent random streams, one per source of randomness, all derived from one seed.

Each source draws from its own ``random.Random``, seeded from the run's seed and the source's
name, so that changing one setting (say the acceptance probability) changes only the draws of
that source and does not reshuffle demand, no-shows or GPS noise.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from enum import StrEnum


class Source(StrEnum):
    """The sources of randomness of a run."""

    DEMAND = "demand"
    ACCEPTANCE = "acceptance"
    NO_SHOW = "no_show"
    CANCELLATION = "cancellation"
    DEMAND_CHANGE = "demand_change"
    BREAKS = "breaks"
    GPS_NOISE = "gps_noise"
    FLEET = "fleet"
    IDS = "ids"
    HOT_SPOTS = "hot_spots"
    CONGESTION = "congestion"


def derive_seed(seed: int, source: str) -> int:
    """A 64-bit seed for ``source``: stable across Python versions (no ``hash()``)."""
    digest = hashlib.sha256(f"ridecast:{seed}:{source}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class Streams:
    """One ``random.Random`` per ``Source``; ``streams[Source.DEMAND].random()``."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._streams = {s: random.Random(derive_seed(seed, s.value)) for s in Source}

    def __getitem__(self, source: Source) -> random.Random:
        return self._streams[source]

    def uuid(self) -> str:
        """A version-4 UUID string from the ids stream (deterministic for the seed)."""
        return str(uuid.UUID(int=self._streams[Source.IDS].getrandbits(128), version=4))
