"""Where the memory of an idle authenticated stream goes, on each port (tracemalloc).

    python bench/stream_memory.py               # 1,000 streams per port, top 15 sites
    python bench/stream_memory.py -n 200 --top 25 --frames 12

Starts ``ridecast serve`` (dedicated websocket port too) in a wrapper process that traces
allocations (tracemalloc) and dumps a snapshot on SIGUSR1. For each port: snapshot, open N
idle streams to one simulation (picows clients in other processes), let them settle,
snapshot again, and print the allocations that grew, by allocation site (the innermost
frame of ridecast or of the library that allocated) and by full traceback for the largest
ones, divided by N.
Then the streams are closed before the other port is measured. Python allocations only:
what tracemalloc sees is a lower bound of what a stream costs (malloc overhead and
C-extension buffers not made through Python's allocator are not in it). The RSS growth
printed beside it includes tracemalloc's own bookkeeping (tens of bytes per traced block):
for RSS per stream without tracing, see bench/connections.py.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx
import psutil
from _load import free_port, make_user, raise_nofile, say_changed_defaults
from connections import client_main, wait_port


def serve_main(snapshot_dir: str, frames: int) -> None:
    """The wrapper: ``serve``, and on SIGUSR1 a snapshot to ``snapshot-<k>.bin``.

    Tracing starts at the first signal (tracing the start-up would make it minutes long):
    only what is allocated after it counts, which is all a difference needs.
    """
    count = [0]

    def dump(_signum: int, _frame: Any) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(frames)
        count[0] += 1
        path = Path(snapshot_dir) / f"snapshot-{count[0]}.bin"
        tracemalloc.take_snapshot().dump(str(path.with_suffix(".tmp")))
        path.with_suffix(".tmp").rename(path)

    signal.signal(signal.SIGUSR1, dump)
    from ridecast.cli.main import main

    sys.argv = ["ridecast", *sys.argv[4:]]
    main()


def snapshot(proc: subprocess.Popen[bytes], directory: Path, k: int) -> tracemalloc.Snapshot:
    os.kill(proc.pid, signal.SIGUSR1)
    path = directory / f"snapshot-{k}.bin"
    deadline = time.monotonic() + 120
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the server wrote no snapshot")
        time.sleep(0.1)
    return tracemalloc.Snapshot.load(str(path))


_OURS = ("/ridecast/", "/starlette/", "/uvicorn/", "/fastapi/", "/websockets/", "/h11/",
         "/httptools/", "/wsproto/", "/asyncio/", "/anyio/")


_ASGI_CHAIN = ("/starlette/", "/fastapi/", "/ridecast/api/", "/ridecast/hub/asgi.py")


def _site(trace_frames: Any) -> str:
    """The innermost frame in a package we care about (else the innermost one)."""
    for frame in reversed(trace_frames):  # tracemalloc orders them oldest first
        if any(part in frame.filename for part in _OURS):
            return f"{_short(frame.filename)}:{frame.lineno}"
    frame = trace_frames[-1]
    return f"{_short(frame.filename)}:{frame.lineno}"


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3."):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return tail if marker != "/lib/python3." else "stdlib/" + tail.split("/", 1)[1]
    return filename


def report(name: str, before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, n: int,
           rss_growth: int, top: int) -> None:
    filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(filters), after.filter_traces(filters)
    stats = after.compare_to(before, "traceback")
    grown = [s for s in stats if s.size_diff > 0]
    total = sum(s.size_diff for s in stats)
    by_site: dict[str, list[int]] = {}
    for stat in grown:
        entry = by_site.setdefault(_site(stat.traceback), [0, 0])
        entry[0] += stat.size_diff
        entry[1] += stat.count_diff
    print(f"\n== {name}: {n} idle streams")
    print(f"  RSS growth {rss_growth / n / 1024:6.1f} KiB per stream; traced Python "
          f"allocations {total / n / 1024:6.1f} KiB per stream")
    by_package: dict[str, int] = {}
    for site, (size, _count) in by_site.items():
        package = site.split("/", 1)[0] if "/" in site else "other"
        if package == "stdlib":
            package = "stdlib/" + site.split("/")[1].split(".")[0]
        by_package[package] = by_package.get(package, 0) + size
    print("  by package of the allocating frame (KiB per stream): " + ", ".join(
        f"{package} {size / n / 1024:.1f}"
        for package, size in sorted(by_package.items(), key=lambda kv: -kv[1])[:8]))
    chain = sum(stat.size_diff for stat in grown
                if any(any(m in f.filename for m in _ASGI_CHAIN) for f in stat.traceback))
    print(f"  allocated under the ASGI app chain (middlewares, router, endpoint): "
          f"{chain / n / 1024:.1f} KiB per stream")
    print(f"  top {top} allocation sites (bytes and blocks per stream):")
    for site, (size, count) in sorted(by_site.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"    {size / n:9,.0f} B  {count / n:6.1f} blocks  {site}")
    print("  largest tracebacks (innermost last):")
    for stat in grown[:5]:
        print(f"    {stat.size_diff / n:9,.0f} B per stream:")
        for frame in list(stat.traceback)[-8:]:
            print(f"        {_short(frame.filename)}:{frame.lineno}")


def open_streams(url: str, n: int) -> tuple[Any, list[Any]]:
    ctx = mp.get_context("spawn")
    opened, stop = ctx.Queue(), ctx.Event()
    shares = [n // 2 + (1 if i < n % 2 else 0) for i in range(2)]
    workers = [ctx.Process(target=client_main, args=(url, k, opened, stop)) for k in shares]
    for w in workers:
        w.start()
    results = [opened.get(True, 600) for _ in workers]
    refused = sum(r[1] for r in results)
    if refused:
        raise RuntimeError(f"{refused} streams were closed by the server")
    return stop, workers


def measure(name: str, kind: str, n: int, top: int, frames: int) -> None:
    """One fresh server per port, so that one port's freed memory does not serve the other."""
    import asyncio

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        db = f"sqlite+aiosqlite:///{directory / 'mem.db'}"
        key = asyncio.run(make_user(db))
        port, ws_port = free_port(), free_port()
        env = {**os.environ, "RIDECAST_DATABASE_URL": db, "RIDECAST_WS_PORT": str(ws_port),
               "RIDECAST_LOG_LEVEL": "warning",
               "RIDECAST_WS_MAX_STREAMS_PER_USER": "50000",
               "RIDECAST_WS_MAX_STREAMS_PER_TOKEN": "50000"}
        say_changed_defaults("ridecast runs with", env)
        proc = subprocess.Popen(
            [sys.executable, __file__, "_serve", str(directory), str(frames), "serve",
             "--port", str(port)], env=env, cwd=tmp, preexec_fn=raise_nofile)
        try:
            wait_port(port)
            wait_port(ws_port)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=("bench", key)) as c:
                sim = c.post("/api/v2/simulation", json={"name": "m", "data": {}}).json()["id"]
                token = c.get("/api/v2/user/token/").json()["token"]
            server = psutil.Process(proc.pid)
            target = ws_port if kind == "ws-port" else port
            url = f"ws://127.0.0.1:{target}/simulation_events/{sim}?token={token}"
            stop, workers = open_streams(url, min(10, n))  # warm-up: first-use caches
            stop.set()
            for w in workers:
                w.join(30)
            time.sleep(1.0)
            before = snapshot(proc, directory, 1)
            rss0 = server.memory_info().rss
            stop, workers = open_streams(url, n)
            time.sleep(1.0)
            after = snapshot(proc, directory, 2)
            rss1 = server.memory_info().rss
            report(name, before, after, n, rss1 - rss0, top)
            stop.set()
            for w in workers:
                w.join(30)
        finally:
            proc.terminate()
            proc.wait(30)


def main(n: int, top: int, frames: int) -> None:
    raise_nofile()
    for kind in ("http-port", "ws-port"):
        measure(f"ridecast {kind}", kind, n, top, frames)
    print("\n(per stream: growth between the two snapshots divided by the streams opened)")


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "_serve":
        serve_main(sys.argv[2], int(sys.argv[3]))
    else:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("-n", type=int, default=1000, help="streams per port (1000)")
        parser.add_argument("--top", type=int, default=15, help="allocation sites shown")
        parser.add_argument("--frames", type=int, default=10, help="traceback depth")
        args = parser.parse_args()
        main(args.n, args.top, args.frames)
