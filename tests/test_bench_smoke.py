"""Every benchmark in bench/ runs to the end with tiny numbers and prints its table.

A bench that no test runs rots unnoticed (an import moves, an option is renamed) until the
day someone needs its figures. Each bench runs here as a subprocess, as a user would run it,
with the fewest events that still exercise every phase. Only the exit status and the
presence of the final table are checked: never a time or a rate (the CI machine is small
and shared, and the figures belong in docs/performance.md, not in assertions).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"

@dataclass
class Run:
    result: Future[int]  # the exit status, -1 when it outran BENCH_TIMEOUT_S
    cwd: Path


PARALLEL = 4
"""Benches run at most this many at a time: all eleven at once took a 2-core machine's load
above 20, and a server's start then outlasted a bench's wait for it."""

BENCH_TIMEOUT_S = 240


# (script, arguments, a line of its final table / summary)
CASES = [
    ("ingest.py", ["--seconds", "0.3", "--connections", "4", "--postgres", "",
                   "--access-log", "--synchronous-full", "--credentials"],
     "ridecast / naive ="),
    ("latency.py", ["--subscribers", "20", "--seconds", "1"], "ratio ridecast / reference"),
    ("fanout.py", ["--smoke"], "ratios (deliveries/s):"),
    ("connections.py", ["-n", "20"], "bare websockets"),
    # Two rounds, SQLite and PostgreSQL in each: the last line is the rounds' medians.
    ("webhooks.py", ["--events", "100", "--sims", "2", "--batch", "50", "--concurrency", "2",
                     "--paced-rate", "40", "--paced-s", "0.3", "--clients-events", "200",
                     "--repeat", "2"],
     "PostgreSQL / SQLite, unordered, p99 at the steady rate: median"),
    # The server with `ridecast worker` processes delivering (the deployment the docs give).
    ("webhooks.py", ["--events", "40", "--sims", "2", "--batch", "20", "--concurrency", "2",
                     "--paced-rate", "40", "--paced-s", "0.3", "--clients-events", "100",
                     "--modes", "unordered", "--webhook-workers", "1"],
     "ridecast serve and 1 webhook worker,"),
    ("simulator.py", ["--vehicles", "5", "--bookings", "20", "--hours", "0.1",
                      "--networks", "straight", "--skip-engine-only"], "end to end"),
    ("notfound_timing.py", ["--requests", "40"], "ratio of medians"),
    # A few requests and a short offline search: the OR-Tools model is built, seeded with
    # ridecast's routes and solved, and the means are printed.
    ("dispatch_quality.py", ["--vehicles", "2", "--rate", "20", "--hours", "0.25",
                             "--seeds", "1", "--solutions", "5"], "mean: SR"),
    # The reference without pre-positioning: its extra constraint and its trimmed seed.
    ("dispatch_quality.py", ["--vehicles", "3", "--rate", "40", "--hours", "0.25",
                             "--seeds", "1", "--solutions", "5",
                             "--reference", "no-prepositioning"], "mean: SR"),
    ("stream_memory.py", ["-n", "20", "--top", "5"], "per stream"),
    ("fanout_cluster.py", ["--subscribers", "4", "--events", "50"], "ratio two nodes / one node"),
    ("demo_sizing.py", ["--runs", "3:20", "--hours", "0.3"], "demo sizing:"),
    ("delivery_log.py", ["--rows", "600", "--polls", "1"], "delivery log, dashboard poll:"),
    ("waiting_retries.py", ["--waiting", "300", "--rate", "40", "--seconds", "0.3",
                            "--polls", "1"],
     "webhooks beside deliveries waiting for a retry:"),
    # Idle, beside one run and beside two, then memory after stop and DELETE.
    ("simulator_isolation.py", ["--quick"], "simulator isolation: done"),
    # Both orders of the two schemes; it stops with an error if either loses a success.
    ("lease_units.py", ["--deliveries", "600", "--rounds", "2", "--unordered"],
     "units / rows: median"),
    # Two nodes, the owner killed at two simulated ages, the other taking over.
    ("takeover.py", ["--quick"], "ratio 0.3 h / 0.1 h: takeover"),
]
# A case's name: its script's, with the case's index when the script runs more than once.
IDS = [script if sum(case[0] == script for case in CASES) == 1 else f"{script}-{index}"
       for index, (script, _args, _marker) in enumerate(CASES)]


def _run(script: str, args: list[str], cwd: Path, env: dict[str, str]) -> int:
    with (cwd / "stdout").open("wb") as out, (cwd / "stderr").open("wb") as err:
        proc = subprocess.Popen([sys.executable, str(BENCH / script), *args], cwd=cwd,
                                env=env, stdout=out, stderr=err, start_new_session=True)
    try:
        return proc.wait(timeout=BENCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        return -1


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """Every bench started, PARALLEL at a time: most of their time is start-up and waiting,
    so side by side they take about two minutes, not six."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with ThreadPoolExecutor(PARALLEL) as pool:
        started = {
            name: Run(pool.submit(_run, script, args, cwd, env), cwd)
            for name, (script, args, _marker), cwd in (
                (name, case, tmp_path_factory.mktemp(name.removesuffix(".py")))
                for name, case in zip(IDS, CASES, strict=True))
        }
        try:
            yield started
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize(("name", "marker"), [(n, c[2]) for n, c in zip(IDS, CASES, strict=True)],
                         ids=IDS)
def test_bench_runs(name: str, marker: str, runs: dict[str, Run]) -> None:
    run = runs[name]
    code = run.result.result()
    stdout = (run.cwd / "stdout").read_text()
    output = stdout + (run.cwd / "stderr").read_text()
    assert code == 0, f"bench/{name} exited {code}:\n{output[-4000:]}"
    assert marker in stdout, f"bench/{name} printed no table:\n{output[-4000:]}"
