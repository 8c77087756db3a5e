"""Timing of the not-found path: another organisation's simulation vs an id that does not exist.

Both answer 404; if one answered measurably faster, a user could probe which ids exist
(issue 13, defect 7). Runs a real ``ridecast serve``; user A asks, alternately, for the
events of user B's busy simulation (another organisation: invisible) and of ids never used
(fresh each time, as a prober would). Prints p50/p90/p99 of each and their ratio.

    python bench/notfound_timing.py --requests 2000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _load import free_port, percentile, say_changed_defaults, spawn, wait_http


def _user(env: dict[str, str], name: str, org: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ridecast.cli.main", "users", "create", name,
                          "--org", org], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {**os.environ, "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/b.db",
               "RIDECAST_LOG_LEVEL": "warning", "RIDECAST_RATE_LIMIT_PER_KEY": "0"}
        say_changed_defaults("ridecast runs with", env)
        key_a, key_b = _user(env, "a", "org-a"), _user(env, "b", "org-b")
        server = spawn(["-m", "ridecast.cli.main", "serve", "--port", str(port)],
                       env=env)
        try:
            wait_http(port, "/healthz")
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, auth=("b", key_b)) as b:
                sim = b.post("/api/v2/simulation", json={"name": "busy"}).json()["id"]
                b.get(f"/api/v2/simulation/{sim}/events")  # busy: in the cache
            times: dict[str, list[float]] = {"invisible": [], "nonexistent": []}
            with httpx.Client(base_url=base, auth=("a", key_a)) as a:
                for i in range(args.requests):
                    kind = "invisible" if i % 2 else "nonexistent"
                    target = sim if kind == "invisible" else 10_000_000 + i
                    started = time.perf_counter()
                    status = a.get(f"/api/v2/simulation/{target}/events").status_code
                    times[kind].append((time.perf_counter() - started) * 1000)
                    assert status == 404, status
            for kind, values in times.items():
                print(f"{kind:12s} p50 {percentile(values, 50):.3f} ms  "
                      f"p90 {percentile(values, 90):.3f} ms  p99 {percentile(values, 99):.3f} ms")
            ratio = percentile(times["invisible"], 50) / percentile(times["nonexistent"], 50)
            print(f"ratio of medians (invisible / nonexistent): {ratio:.3f}")
        finally:
            server.terminate()
            server.wait(timeout=15)


if __name__ == "__main__":
    main()
