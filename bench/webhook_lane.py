"""The cap of an ordered lane with a slow receiver, beside the same burst unordered.

Runs on 127.0.0.1 only, bounded in count and time::

    python bench/webhook_lane.py                       # 200 events, receiver answers in 50 ms
    python bench/webhook_lane.py --events 100 --delay-ms 20

A ``ridecast serve`` (its own SQLite file) delivers ``--events`` events of one simulation
to a receiver that answers each request after ``--delay-ms``: once with the default ordered
delivery (one request in flight per simulation), once with ``messaging_webhook_ordering:
"unordered"`` (up to ``--concurrency`` per endpoint). Reported: deliveries/s of each, and
the ordered cap the arithmetic gives (1 / the receiver's delay). docs/webhooks.md quotes it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _load import free_port, make_user

from ridecast.cli.receiver import ReceiverThread, Reply, Request


class Slow:
    """Answers every request after ``delay_s``; counts requests per simulation."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.by_sim: dict[int, int] = {}
        self.lock = threading.Lock()

    async def __call__(self, request: Request) -> Reply:
        await asyncio.sleep(self.delay_s)
        sim = int(request.json()["simulation_id"])  # type: ignore[index]
        with self.lock:
            self.by_sim[sim] = self.by_sim.get(sim, 0) + 1
        return Reply(204)


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout} s")


def run(args: argparse.Namespace) -> None:
    slow = Slow(args.delay_ms / 1000)
    with tempfile.TemporaryDirectory() as tmp, ReceiverThread(slow) as receiver:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'lane.db'}"
        key = asyncio.run(make_user(url))
        port = free_port()
        env = {**os.environ, "RIDECAST_DATABASE_URL": url, "RIDECAST_LOG_LEVEL": "warning",
               "RIDECAST_WEBHOOK_ALLOW_PRIVATE": "true",
               "RIDECAST_WEBHOOK_CONCURRENCY_PER_ENDPOINT": str(args.concurrency)}
        server = subprocess.Popen(
            [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port)],
            env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_http(f"{base}/healthz")
            with httpx.Client(base_url=base, auth=("bench", key), timeout=60) as http:
                for ordering in ("ordered", "unordered"):
                    data = {"messaging_webhook_url": receiver.url,
                            "messaging_webhook_message_types": ["vehicle_use"],
                            "messaging_webhook_ordering": ordering}
                    sim = http.post("/api/v2/simulation",
                                    json={"name": ordering, "data": data}).json()["id"]
                    events = [{"agent_type": "vehicle", "message_type": "vehicle_use",
                               "data": {"vehicle_id": i, "action": "disabled"},
                               "current_sim_ts": "2026-11-26T00:00:00+00:00",
                               "transmit_to_websocket": False} for i in range(args.events)]
                    start = time.perf_counter()
                    http.post(f"/api/v2/simulation/{sim}/events", json=events).raise_for_status()
                    deadline = time.monotonic() + args.timeout
                    while slow.by_sim.get(sim, 0) < args.events:
                        if time.monotonic() > deadline:
                            raise SystemExit(f"{ordering}: not delivered in {args.timeout} s")
                        time.sleep(0.01)
                    elapsed = time.perf_counter() - start
                    print(f"{ordering:>9}: {args.events} deliveries in {elapsed:.2f} s = "
                          f"{args.events / elapsed:,.1f}/s")
        finally:
            server.terminate()
            server.wait(15)
    print(f"ordered cap by the arithmetic: 1 / {args.delay_ms:g} ms = "
          f"{1000 / args.delay_ms:,.1f}/s per simulation; unordered: up to "
          f"{args.concurrency} x that per endpoint")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=120.0)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
