"""The same seed and journal give the same events in any process, and from a snapshot.

``determinism_run.py`` runs one seeded run on the road network with a fixed journal of
operations, in separate processes with different hash seeds (so that nothing may depend on
the order of a set or on ids of objects): twice from the start, and once more from a
snapshot another process took mid-run. The event streams are compared byte for byte (the
engine's events carry no ``server_ts`` or ``event_id``: the event log adds those).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(hash_seed: str, *args: str | Path) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-m", "tests.simulator.determinism_run",
                           *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_two_processes_and_a_restored_snapshot_give_the_same_stream(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    with_snapshot, resumed = tmp_path / "with_snapshot", tmp_path / "resumed"
    snap = tmp_path / "engine.snapshot"
    _run("1", "full", first)
    _run("2", "full", second)
    _run("3", "snapshot", with_snapshot, snap)
    _run("4", "resume", snap, resumed)
    reference = first.read_bytes()
    assert reference.count(b"\n") > 1000
    assert second.read_bytes() == reference
    assert with_snapshot.read_bytes() == reference
    # The restored engine's stream is the reference's from the snapshot's point on.
    tail = resumed.read_bytes()
    assert 200 < tail.count(b"\n") < reference.count(b"\n")
    assert reference.endswith(tail)
    assert reference[:-len(tail)].endswith(b"\n")
