"""Delivery latency at fixed rates: POST sent -> frame received, ridecast vs a bare reference.

    python bench/latency.py                                  # 100, 1,000 and 10,000 subscribers
    python bench/latency.py --subscribers 50 --seconds 2     # smoke run

One event per POST, paced at a fixed rate (40 events/s up to 1,000 subscribers, 4 events/s
at 10,000: the same 40,000 deliveries/s at most), all subscribers on one simulation.
Measured on 127.0.0.1, in the same run:

* ridecast on its dedicated websocket port (``RIDECAST_WS_PORT``) and on the HTTP port
  (uvicorn + ASGI), events POSTed to the real ingest endpoint;
* the reference: a bare ``websockets`` server on uvloop that takes the same POSTs on a
  minimal HTTP/1.1 endpoint, stamps ``server_ts`` and ``event_id``, serialises the frame
  once and calls ``websockets.broadcast()`` (``bare_main``, about 30 lines).

The send time (µs) travels inside the event, so every frame gives one latency sample from
just before its POST to its receipt. Subscribers are picows readers in separate processes
(``fanout.client_main``); their CPU is printed to show they are not the bottleneck.
Percentiles are over every (subscriber, event) pair; "lost" must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from _load import basic_auth, free_port, raise_nofile
from fanout import Result, Ridecast, envelope, run_scenario, start_ridecast

CONNECTIONS = 4  # keep-alive connections of the publisher (one POST in flight on each)


def rate_for(subscribers: int) -> float:
    return 40.0 if subscribers <= 1000 else 4.0


# ---- the reference server ------------------------------------------------------------------

def bare_main(http_port: int, ws_port: int) -> None:
    """websockets + uvloop: POST /events -> stamp, serialise once, ``broadcast()``."""
    import logging
    from datetime import UTC, datetime

    import uvloop
    from websockets.asyncio.server import broadcast, serve

    logging.getLogger("websockets").setLevel(logging.CRITICAL)
    clients: set[Any] = set()
    seq = [0]
    length_re = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)

    async def stream(conn: Any) -> None:
        clients.add(conn)
        try:
            await conn.wait_closed()
        finally:
            clients.discard(conn)

    class Ingest(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport, self.buf = transport, b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while (end := self.buf.find(b"\r\n\r\n")) >= 0:
                match = length_re.search(self.buf, 0, end)
                size = int(match.group(1)) if match else 0
                if len(self.buf) < end + 4 + size:
                    return
                event = orjson.loads(self.buf[end + 4:end + 4 + size])
                self.buf = self.buf[end + 4 + size:]
                seq[0] += 1
                event["server_ts"] = datetime.now(UTC).isoformat()
                event["event_id"] = str(seq[0])
                broadcast(clients, orjson.dumps(event), text=True)
                body = b'{"event_ids":["%d"],"count":1}' % seq[0]
                self.transport.write(b"HTTP/1.1 201 Created\r\ncontent-type: application/json"
                                     b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        await loop.create_server(Ingest, "127.0.0.1", http_port)
        async with serve(stream, "127.0.0.1", ws_port, compression=None):
            await asyncio.Future()

    raise_nofile()
    uvloop.run(main())


def start_bare() -> tuple[subprocess.Popen[bytes], int, int]:
    import socket

    http_port, ws_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, __file__, "_bare", str(http_port), str(ws_port)],
                            preexec_fn=raise_nofile)
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", ws_port), timeout=0.5):
                return proc, http_port, ws_port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the reference server did not start")


# ---- the publisher -------------------------------------------------------------------------

def paced_publisher(port: int, path: str, headers: dict[str, str], sim: int, events: int,
                    rate: float) -> Any:
    """POST ``events`` single events at ``rate``/s over a few raw keep-alive connections."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    async def exchange(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                       seq: int) -> None:
        reader, writer = conn
        body = orjson.dumps(envelope(sim, seq, time.time_ns() // 1000))
        writer.write(f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: "
                     f"application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode()
                     + body)
        head = await reader.readuntil(b"\r\n\r\n")
        if head[9:12] != b"201":
            raise RuntimeError(f"POST answered {head[:12]!r}")
        match = re.search(rb"content-length:\s*(\d+)", head, re.IGNORECASE)
        if match:
            await reader.readexactly(int(match.group(1)))

    async def publish() -> None:
        free: asyncio.Queue[Any] = asyncio.Queue()
        for _ in range(CONNECTIONS):
            free.put_nowait(await asyncio.open_connection("127.0.0.1", port))

        async def post(seq: int) -> None:
            conn = await free.get()
            try:
                await exchange(conn, seq)
            finally:
                free.put_nowait(conn)

        t0 = time.monotonic()
        tasks = []
        for seq in range(events):
            delay = t0 + seq / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(post(seq)))
        await asyncio.gather(*tasks)
        while not free.empty():
            free.get_nowait()[1].close()

    return publish


# ---- the run -------------------------------------------------------------------------------

def line(r: Result) -> str:
    return (f"  {r.name:<22} subs={r.subscribers:<6} events={r.events:<5} lost={r.lost:<5} "
            f"p50={r.pct(50):7.2f}ms p99={r.pct(99):7.2f}ms p99.9={r.pct(99.9):7.2f}ms  "
            f"server CPU={r.server_cpu * 100:3.0f}% clients CPU={r.client_cpu * 100:3.0f}%")


async def run_all(rc: Ridecast, bare: tuple[subprocess.Popen[bytes], int, int],
                  sizes: list[int], seconds: float) -> dict[tuple[str, int], Result]:
    results: dict[tuple[str, int], Result] = {}
    auth = {"authorization": basic_auth(*rc.auth)}
    bare_proc, bare_http, bare_ws = bare
    path = f"/api/v2/simulation/{rc.sim}/events"
    # Warm-up, no subscriber yet: first-request costs (imports, caches) stay out of the figures.
    await paced_publisher(rc.port, path, auth, rc.sim, 20, 100.0)()
    await paced_publisher(bare_http, path, {}, rc.sim, 20, 100.0)()
    for n in sizes:
        rate = rate_for(n)
        events = max(1, int(rate * seconds))
        print(f"{n} subscribers, {rate:g} events/s, {events} events "
              f"({n * events:,} deliveries):", flush=True)
        contenders = [
            ("ridecast ws-port", f"ws://127.0.0.1:{rc.ws_port}", rc.port, auth, rc.proc.pid),
            ("ridecast http-port", f"ws://127.0.0.1:{rc.port}", rc.port, auth, rc.proc.pid),
            ("reference", f"ws://127.0.0.1:{bare_ws}", bare_http, {}, bare_proc.pid),
        ]
        for name, base, post_port, headers, pid in contenders:
            url = (f"{base}/simulation_events/{rc.sim}?token={rc.token}"
                   if name != "reference" else f"{base}/s")
            publish = paced_publisher(post_port, path, headers, rc.sim, events, rate)
            r = await run_scenario(name, url, n, events, pid, publish, deadline_s=seconds + 30)
            results[(name, n)] = r
            print(line(r), flush=True)
    return results


def table(results: dict[tuple[str, int], Result], sizes: list[int]) -> None:
    print("\nlatency POST -> frame received (ms), and ratio ridecast / reference:")
    print(f"  {'subscribers':>11} {'server':<20} {'rate':>5} {'p50':>8} {'p99':>8} "
          f"{'p99.9':>8} {'lost':>5}   {'x p50':>6} {'x p99':>6} {'x p99.9':>7}")
    for n in sizes:
        ref = results[("reference", n)]
        for name in ("ridecast ws-port", "ridecast http-port", "reference"):
            r = results[(name, n)]
            ratios = "  ".join(f"{r.pct(p) / ref.pct(p):6.2f}" if ref.pct(p) > 0 else "   n/a"
                               for p in (50, 99, 99.9))
            print(f"  {n:>11,} {name:<20} {rate_for(n):>5g} {r.pct(50):8.2f} {r.pct(99):8.2f} "
                  f"{r.pct(99.9):8.2f} {r.lost:>5}   {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--seconds", type=float, default=10.0, help="per scenario")
    args = parser.parse_args()
    raise_nofile()
    sizes = sorted(args.subscribers)
    with tempfile.TemporaryDirectory() as tmp:
        rc = start_ridecast(Path(tmp))
        bare = start_bare()
        try:
            results = asyncio.run(run_all(rc, bare, sizes, args.seconds))
        finally:
            for proc in (rc.proc, bare[0]):
                proc.terminate()
            for proc in (rc.proc, bare[0]):
                proc.wait(15)
    table(results, sizes)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "_bare":
        bare_main(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
