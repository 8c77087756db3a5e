"""The ingest bench's load generator, in a process of its own: Debian's ``wrk`` when it is on
the PATH, else a lean asyncio client (``_load.run_load`` on uvloop).

    python bench/_loadgen.py PORT PATH BODY_FILE CONNECTIONS SECONDS [HEADER: VALUE ...]

Each of ``CONNECTIONS`` keep-alive connections sends the same POST, one request in flight at a
time, for ``SECONDS``; every contender of bench/ingest.py gets the very same generator. It
runs outside the bench's process so that the Python of the bench never competes with its
own client, and its CPU per request is measured (``run``) and printed beside each server's,
so that a reader can see that the generator is not what limits a contender.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _load import percentile, run_load

# wrk runs this in each of its threads: the request from the environment, and one line of
# figures at the end (latencies in µs, from wrk's own per-request histogram).
_WRK_SCRIPT = r"""
local f = assert(io.open(os.getenv("LOADGEN_BODY"), "rb"))
wrk.method = "POST"
wrk.path = os.getenv("LOADGEN_PATH")
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
for line in (os.getenv("LOADGEN_HEADERS") or ""):gmatch("[^\n]+") do
  local k, v = line:match("^([^:]+):%s*(.*)$")
  wrk.headers[k] = v
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("LOADGEN %d %d %d %d %.1f %.1f %.1f\n", summary.requests,
    summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
"""


@dataclass
class GenResult:
    """One generator run: requests answered, seconds, latency (ms), failures, and the
    generator's own CPU seconds."""

    tool: str
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    failed: int  # answers >= 400 and socket errors
    cpu_s: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_s / max(self.requests, 1) * 1e6


def combined(runs: list[GenResult]) -> GenResult:
    """Several runs against one server as one: requests, seconds, failures and CPU added up;
    p50, p99 and mean the median of the runs' (a run's percentiles cannot be merged)."""
    return GenResult(
        runs[0].tool, sum(r.requests for r in runs), sum(r.seconds for r in runs),
        statistics.median(r.p50_ms for r in runs), statistics.median(r.p99_ms for r in runs),
        statistics.median(r.mean_ms for r in runs), sum(r.failed for r in runs),
        sum(r.cpu_s for r in runs))


def tool(choice: str = "auto") -> str:
    """The generator ``run`` uses for ``choice`` (``auto``: ``wrk`` when installed, else
    ``python``)."""
    if choice == "auto":
        return "wrk" if shutil.which("wrk") else "python"
    return choice


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(port: int, path: str, body: bytes, headers: dict[str, str], *, connections: int,
        seconds: float, choice: str = "auto") -> GenResult:
    """One run of the generator (``tool(choice)``) against ``127.0.0.1:port``; blocks until
    it is done."""
    with tempfile.TemporaryDirectory(prefix="ridecast-loadgen-") as tmp:
        body_file = Path(tmp) / "body"
        body_file.write_bytes(body)
        which = tool(choice)
        cpu_before = _children_cpu()
        if which == "wrk":
            script = Path(tmp) / "post.lua"
            script.write_text(_WRK_SCRIPT)
            env = {**os.environ, "LOADGEN_BODY": str(body_file), "LOADGEN_PATH": path,
                   "LOADGEN_HEADERS": "".join(f"{k}: {v}\n" for k, v in headers.items())}
            # wrk takes whole seconds; one thread is far from its limit at these rates (the
            # wire line of the bench shows it), and leaves the second core to the server.
            out = subprocess.run(
                ["wrk", "-t", "1", "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
                 "--timeout", "10s", "-s", str(script), f"http://127.0.0.1:{port}{path}"],
                env=env, capture_output=True, text=True, check=True).stdout
            line = next(x for x in out.splitlines() if x.startswith("LOADGEN "))
            requests, duration_us, status, errors, p50, p99, mean = line.split()[1:]
            return GenResult("wrk", int(requests), int(duration_us) / 1e6, float(p50) / 1000,
                             float(p99) / 1000, float(mean) / 1000, int(status) + int(errors),
                             _children_cpu() - cpu_before)
        out = subprocess.run(
            [sys.executable, __file__, str(port), path, str(body_file), str(connections),
             str(seconds), *(f"{k}: {v}" for k, v in headers.items())],
            capture_output=True, text=True, check=True).stdout
        figures = json.loads(out)
        return GenResult("python", figures["requests"], figures["seconds"], figures["p50_ms"],
                         figures["p99_ms"], figures["mean_ms"], figures["failed"],
                         _children_cpu() - cpu_before)


def main() -> None:
    port, path, body_file, connections, seconds = sys.argv[1:6]
    headers = dict(h.split(": ", 1) for h in sys.argv[6:])
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    result = asyncio.run(run_load(int(port), "POST", path, Path(body_file).read_bytes(),
                                  headers, connections=int(connections),
                                  seconds=float(seconds)))
    ms = [x * 1000 for x in result.latencies]
    print(json.dumps({
        "requests": result.requests, "seconds": result.seconds,
        "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
        "mean_ms": sum(ms) / len(ms) if ms else float("nan"),
        "failed": sum(n for status, n in result.statuses.items() if status >= 400),
    }))


if __name__ == "__main__":
    main()
