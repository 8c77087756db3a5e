"""The server's garbage-collector settings: what start-up made is frozen, thresholds raised."""

from __future__ import annotations

import gc

from ridecast.cli import gctuning


def test_tune_freezes_start_up_objects_and_raises_thresholds() -> None:
    before = gc.get_threshold()
    try:
        gctuning.tune()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (gctuning.YOUNG_THRESHOLD, *gctuning.OLDER_THRESHOLDS)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
