"""Fan-out benchmark of the websocket hub, with two references measured in the same run.

    python bench/fanout.py            # full run (about 2-3 minutes)
    python bench/fanout.py --quick    # 1 and 100 subscribers only
    python bench/fanout.py --smoke    # 1 and 100, a fortieth of the events (CI: it runs)

What it measures, on 127.0.0.1 only:

* ridecast: one publisher posts events through the real ingest endpoint
  (``POST /api/v2/simulation/{id}/events``); 1, 100 and 1,000 subscribers on one simulation
  and on the "all" channel, on the dedicated websocket port (``RIDECAST_WS_PORT``) and,
  for comparison, on the HTTP port (uvicorn + ASGI). Throughput (back-to-back batches) and
  latency (paced at 40,000 deliveries/s), from just before the POST to client receipt.
* reference (a), the ceiling: a bare ``websockets`` server calling ``broadcast()`` on
  pre-serialised frames of the same shape and size (~500 bytes).
* reference (b): daphne + channels, ``group_send`` on the in-memory channel layer.

Subscribers run in separate processes with a lean picows receive loop; their CPU use is
reported so that one can check the clients were not the bottleneck. Each client counts
every frame: "lost" must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
from _load import free_port, make_user, raise_nofile, say_changed_defaults

INFLIGHT = 8  # POSTs the one publisher keeps in flight (HTTP keep-alive connections)
SETTLE_S = 0.5  # after the handshakes, time for every stream to be subscribed
BURST = 50  # frames per broadcast burst of the bare reference (= ridecast's POST batch)
PAD = 88  # booking ids of padding: frames of about 500 bytes
MARK = b'"booking_ids":['
STAMP = b'"server_ts":"'


def envelope(sim: int, seq: int, ts_us: int) -> dict[str, Any]:
    """The benchmark event: bookings_cancellation carrying its sequence number and send time."""
    return {
        "simulation_id": sim, "agent_type": "event_publisher",
        "message_type": "bookings_cancellation",
        "data": {"booking_ids": [seq, ts_us, *range(1000, 1000 + PAD)]},
        "current_sim_ts": "2024-05-01T10:00:00+00:00",
        "transmit_to_websocket": True,
    }


def reference_frame(seq: int, ts_us: int) -> bytes:
    """A frame as ridecast sends it (envelope plus event_id), for the references."""
    now = datetime.fromtimestamp(ts_us / 1e6, UTC).isoformat()
    return orjson.dumps({**envelope(1, seq, ts_us), "server_ts": now, "event_id": str(seq + 1)})


# ---- subscriber processes ----------------------------------------------------------------

def client_main(url: str, n: int, expected: int, deadline_s: float,
                ready: Any, results: Any, go: Any) -> None:
    """Open ``n`` connections, count frames until each has ``expected`` or the deadline."""
    import picows

    raise_nofile()
    counts = [0] * n
    lat = array("d")
    hub_lat = array("d")
    last = [0.0]
    closed = [0]

    class Listener(picows.WSListener):  # type: ignore[misc]
        def __init__(self, i: int) -> None:
            self.i = i

        def on_ws_frame(self, transport: Any, frame: Any) -> None:
            if frame.msg_type == picows.WSMsgType.TEXT:
                now = time.time_ns() // 1000
                data = frame.get_payload_as_bytes()
                start = data.find(MARK) + len(MARK)
                comma = data.find(b",", start)
                ts = int(data[comma + 1:data.find(b",", comma + 1)])
                lat.append((now - ts) / 1000.0)
                if self.i == 0:  # one connection per process: the server-side share
                    at = data.find(STAMP) + len(STAMP)
                    stamped = datetime.fromisoformat(data[at:data.find(b'"', at)].decode())
                    hub_lat.append(now / 1000.0 - stamped.timestamp() * 1000.0)
                counts[self.i] += 1
                last[0] = now / 1e6
            elif frame.msg_type == picows.WSMsgType.CLOSE:
                closed[0] += 1
                transport.disconnect()
            elif frame.msg_type == picows.WSMsgType.PING:
                transport.send_pong(frame.get_payload_as_bytes())

    async def run() -> None:
        transports = []
        for start in range(0, n, 100):
            batch = await asyncio.gather(*(
                picows.ws_connect(lambda i=i: Listener(i), url, websocket_handshake_timeout=30)
                for i in range(start, min(n, start + 100))
            ))
            transports += [t for t, _l in batch]
        ready.put(n)
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        cpu0 = time.process_time()
        t0 = time.monotonic()
        deadline = t0 + deadline_s
        while time.monotonic() < deadline and min(counts) < expected:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # late or extra frames would show up here
        cpu = time.process_time() - cpu0
        results.put({"received": sum(counts), "min": min(counts), "max": max(counts),
                     "lat": lat.tobytes(), "hub_lat": hub_lat.tobytes(), "last": last[0],
                     "cpu": cpu,
                     "wall": time.monotonic() - t0, "closed": closed[0]})
        for transport in transports:
            transport.disconnect()

    asyncio.run(run())


@dataclass
class Result:
    """One scenario's figures."""

    name: str
    subscribers: int
    events: int
    deliveries: int
    lost: int
    seconds: float
    server_cpu: float
    client_cpu: float
    lat: list[float]
    hub: list[float]
    fanout_ms: float = 0.0

    @property
    def rate(self) -> float:
        return self.deliveries / self.seconds if self.seconds > 0 else 0.0

    def pct(self, p: float, which: str = "lat") -> float:
        values: list[float] = getattr(self, which)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(p / 100 * len(values)))]


def fanout_totals(metrics_url: str | None) -> tuple[float, float]:
    """(seconds, batches) of ridecast_ws_fanout_seconds so far; zeros without a URL."""
    if metrics_url is None:
        return 0.0, 0.0
    totals = {"sum": 0.0, "count": 0.0}
    for line in httpx.get(metrics_url).text.splitlines():
        for kind in totals:
            if line.startswith(f"ridecast_ws_fanout_seconds_{kind} "):
                totals[kind] = float(line.split()[1])
    return totals["sum"], totals["count"]


async def run_scenario(name: str, url: str | Sequence[str], subscribers: int, events: int,
                       server_pid: int | Sequence[int], publish: Any, deadline_s: float = 60.0,
                       metrics_url: str | None = None) -> Result:
    """Connect subscribers in client processes, run ``publish()``, gather their counts.

    Several URLs (the nodes of a cluster) share the subscribers, one client process or more
    per URL; the server CPU is that of every process in ``server_pid``.
    """
    urls = [url] if isinstance(url, str) else list(url)
    pids = [server_pid] if isinstance(server_pid, int) else list(server_pid)
    procs = max(len(urls), 1 if subscribers <= 100 else 2)
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [subscribers // procs + (1 if i < subscribers % procs else 0) for i in range(procs)]
    workers = [ctx.Process(target=client_main,
                           args=(urls[i % len(urls)], k, events, deadline_s, ready, results, go))
               for i, k in enumerate(shares)]
    for w in workers:
        w.start()
    loop = asyncio.get_running_loop()
    for _ in workers:
        await loop.run_in_executor(None, ready.get, True, 120)
    # A stream is subscribed a moment after its handshake (token and visibility checks).
    await asyncio.sleep(SETTLE_S + subscribers / 2000)
    servers = [psutil.Process(pid) for pid in pids]
    cpu0 = sum(sum(server.cpu_times()[:2]) for server in servers)
    fan0 = await loop.run_in_executor(None, fanout_totals, metrics_url)
    go.set()
    started = time.time()
    await publish()
    outs = [await loop.run_in_executor(None, results.get, True, deadline_s + 30) for _ in workers]
    cpu = sum(sum(server.cpu_times()[:2]) for server in servers) - cpu0
    fan1 = await loop.run_in_executor(None, fanout_totals, metrics_url)
    batches = fan1[1] - fan0[1]
    for w in workers:
        w.join(10)
    received = sum(o["received"] for o in outs)
    last = max(o["last"] for o in outs) or time.time()
    seconds = max(last - started, 1e-6)
    lat, hub = array("d"), array("d")
    for o in outs:
        lat.frombytes(o["lat"])
        hub.frombytes(o["hub_lat"])
    return Result(name, subscribers, events, received, subscribers * events - received, seconds,
                  cpu / seconds, sum(o["cpu"] / max(o["wall"], 1e-6) for o in outs),
                  sorted(lat), sorted(hub),
                  (fan1[0] - fan0[0]) / batches * 1000 if batches else 0.0)


# ---- servers ------------------------------------------------------------------------------

@dataclass
class Ridecast:
    """A ``ridecast serve`` process with a user, a simulation and a token."""

    proc: subprocess.Popen[bytes]
    port: int
    ws_port: int
    auth: tuple[str, str]
    sim: int
    token: str


def start_ridecast(tmp: Path) -> Ridecast:
    url = f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
    key = asyncio.run(make_user(url))
    port, ws_port = free_port(), free_port()
    env = {**os.environ, "RIDECAST_DATABASE_URL": url, "RIDECAST_WS_PORT": str(ws_port),
           "RIDECAST_LOG_LEVEL": "warning", "RIDECAST_WS_SEND_QUEUE": "100000",
           # One user and one token open every stream: lift the per-user and per-token caps
           # (2,000 and 200 by default), or most of 1,000 subscribers are refused (4102).
           "RIDECAST_WS_MAX_STREAMS_PER_USER": "50000",
           "RIDECAST_WS_MAX_STREAMS_PER_TOKEN": "50000"}
    say_changed_defaults("ridecast runs with", env)
    proc = subprocess.Popen([sys.executable, "-m", "ridecast.cli.main", "serve", "--port",
                             str(port)], env=env, cwd=tmp, preexec_fn=raise_nofile)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    with httpx.Client(base_url=base, auth=("bench", key)) as http:
        sim = http.post("/api/v2/simulation", json={"name": "bench", "data": {}}).json()["id"]
        token = http.get("/api/v2/user/token/").json()["token"]
    return Ridecast(proc, port, ws_port, ("bench", key), int(sim), token)


def ridecast_publisher(rc: Ridecast, events: int, *, batch: int, rate: float | None) -> Any:
    """Post ``events`` events in batches, back to back or at ``rate`` events/s."""
    async def publish() -> None:
        limits = httpx.Limits(max_connections=INFLIGHT)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rc.port}", auth=rc.auth,
                                     timeout=60, limits=limits) as http:
            slots = asyncio.Semaphore(INFLIGHT)

            async def post(start: int) -> None:
                try:
                    ts = time.time_ns() // 1000
                    items = [envelope(rc.sim, seq, ts)
                             for seq in range(start, min(events, start + batch))]
                    response = await http.post(f"/api/v2/simulation/{rc.sim}/events",
                                               content=orjson.dumps(items),
                                               headers={"content-type": "application/json"})
                    response.raise_for_status()
                finally:
                    slots.release()

            t0 = time.monotonic()
            tasks = []
            for start in range(0, events, batch):
                if rate:
                    delay = t0 + start / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await slots.acquire()
                tasks.append(asyncio.create_task(post(start)))
            await asyncio.gather(*tasks)
    return publish


def bare_main(port: int) -> None:
    """Reference (a): a bare websockets server; "/control" receives "go <n>" and broadcasts."""
    import logging

    from websockets.asyncio.server import broadcast, serve

    raise_nofile()
    logging.getLogger("websockets").setLevel(logging.CRITICAL)
    clients: set[Any] = set()

    async def handler(conn: Any) -> None:
        if conn.request.path == "/control":
            async for message in conn:
                n = int(message.split()[1])
                for seq in range(n):
                    broadcast(clients, reference_frame(seq, time.time_ns() // 1000), text=True)
                    # Yield between bursts of BURST frames, as ridecast's group commit
                    # publishes batches; yielding after every frame starves the writes.
                    if seq % BURST == BURST - 1:
                        await asyncio.sleep(0)
                await conn.send("done")
            return
        clients.add(conn)
        try:
            await conn.wait_closed()
        finally:
            clients.discard(conn)

    async def main() -> None:
        async with serve(handler, "127.0.0.1", port, compression=None):
            await asyncio.Future()

    asyncio.run(main())


def daphne_main(port: int) -> None:
    """Reference (b): daphne + channels, group_send on the in-memory channel layer."""
    import django
    from django.conf import settings

    raise_nofile()
    settings.configure(
        DEBUG=False, ALLOWED_HOSTS=["*"], INSTALLED_APPS=["channels"],
        CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer",
                                    "CONFIG": {"capacity": 1_000_000, "expiry": 600}}},
    )
    django.setup()
    from channels.generic.websocket import AsyncWebsocketConsumer
    from channels.routing import URLRouter
    from daphne.server import Server
    from django.urls import path

    class Stream(AsyncWebsocketConsumer):  # type: ignore[misc]
        async def connect(self) -> None:
            await self.channel_layer.group_add("bench", self.channel_name)
            await self.accept()

        async def bench_frame(self, event: dict[str, Any]) -> None:
            await self.send(text_data=event["text"])

    class Control(AsyncWebsocketConsumer):  # type: ignore[misc]
        async def receive(self, text_data: str | None = None, bytes_data: Any = None) -> None:
            n = int((text_data or "go 0").split()[1])
            for seq in range(n):
                frame = reference_frame(seq, time.time_ns() // 1000).decode()
                await self.channel_layer.group_send("bench", {"type": "bench.frame", "text": frame})
            await self.send("done")

    app = URLRouter([path("control", Control.as_asgi()), path("s", Stream.as_asgi())])
    Server(application=app, endpoints=[f"tcp:port={port}:interface=127.0.0.1"],
           signal_handlers=True, verbosity=0).run()


def start_reference(kind: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, f"_{kind}", str(port)],
                            preexec_fn=raise_nofile)
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{kind} reference did not start")


def reference_publisher(port: int, path: str, events: int) -> Any:
    async def publish() -> None:
        from websockets.asyncio.client import connect

        async with connect(f"ws://127.0.0.1:{port}{path}") as ws:
            await ws.send(f"go {events}")
            await ws.recv()
    return publish


# ---- the run ------------------------------------------------------------------------------

def report(r: Result) -> None:
    print(f"  {r.name:<34} subs={r.subscribers:<5} events={r.events:<6} "
          f"{r.rate:>10,.0f} deliveries/s  lost={r.lost:<4} "
          f"p50={r.pct(50):6.1f}ms p99={r.pct(99):6.1f}ms p99.9={r.pct(99.9):6.1f}ms "
          f"server CPU={r.server_cpu * 100:4.0f}% clients CPU={r.client_cpu * 100:4.0f}%  "
          f"[stamp->receipt p50={r.pct(50, 'hub'):.1f} p99={r.pct(99, 'hub'):.1f}ms"
          + (f", hub {r.fanout_ms:.2f}ms/batch]" if r.fanout_ms else "]"),
          flush=True)


async def ridecast_scenarios(rc: Ridecast, sizes: list[int], divisor: int,
                             results: dict[str, Result], latency_only: bool = False) -> None:
    direct = f"ws://127.0.0.1:{rc.ws_port}"
    asgi = f"ws://127.0.0.1:{rc.port}"
    metrics = f"http://127.0.0.1:{rc.port}/metrics"
    print("ridecast, throughput (batches of 50 events per POST, back to back):")
    for n in [] if latency_only else sizes:
        events = {1: 20000, 100: 2000, 1000: 300}[n] // divisor
        for label, path in (("sim", f"/simulation_events/{rc.sim}"),
                            ("all", "/simulation_events/")):
            for port_label, base in (("ws-port", direct), ("http-port", asgi)):
                if port_label == "http-port" and (label == "all" or n == 1):
                    continue
                name = f"ridecast {port_label} {label}"
                r = await run_scenario(
                    name, f"{base}{path}?token={rc.token}", n, events, rc.proc.pid,
                    ridecast_publisher(rc, events, batch=50, rate=None), metrics_url=metrics)
                results[f"{name} {n}"] = r
                report(r)
    print("ridecast, latency (paced at 40,000 deliveries/s, 40 POSTs/s):")
    for n in sizes[1:]:
        rate = 40000 / n
        batch = max(1, int(rate / 40))
        events = max(1, int(rate * {1: 3, 4: 2}.get(divisor, 0.25)))
        for port_label, base in (("ws-port", direct), ("http-port", asgi)):
            name = f"ridecast {port_label} sim paced"
            r = await run_scenario(
                name, f"{base}/simulation_events/{rc.sim}?token={rc.token}", n, events,
                rc.proc.pid, ridecast_publisher(rc, events, batch=batch, rate=rate),
                metrics_url=metrics)
            results[f"{name} {n}"] = r
            report(r)


async def reference_scenarios(kind: str, proc: subprocess.Popen[bytes], port: int,
                              sizes: list[int], divisor: int,
                              results: dict[str, Result]) -> None:
    # The same number of deliveries at every size: 300k for broadcast(), 20k for daphne,
    # which manages about 1-5k deliveries/s.
    per_1000 = 300 if kind == "bare" else 20
    name = "websockets broadcast()" if kind == "bare" else "daphne+channels"
    for n in sizes[1:]:
        count = max(per_1000 * (1000 // n) // divisor, 5)
        r = await run_scenario(name, f"ws://127.0.0.1:{port}/s", n, count, proc.pid,
                               reference_publisher(port, "/control", count), deadline_s=90)
        results[f"{kind} {n}"] = r
        report(r)


def main(divisor: int, *, latency_only: bool = False) -> None:
    """``divisor``: 1 for the full run, 4 for --quick, 40 for --smoke (fewer events)."""
    raise_nofile()
    sizes = [1, 100] if divisor > 1 else [1, 100, 1000]
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rc = start_ridecast(Path(tmp))
        try:
            asyncio.run(ridecast_scenarios(rc, sizes, divisor, results, latency_only))
        finally:
            rc.proc.terminate()
            rc.proc.wait(15)
    if latency_only:
        return
    print("references (same frames, same clients):")
    for kind in ("bare", "daphne"):
        proc, port = start_reference(kind)
        try:
            asyncio.run(reference_scenarios(kind, proc, port, sizes, divisor, results))
        finally:
            proc.terminate()
            proc.wait(15)
    print("ratios (deliveries/s):")
    for n in sizes[1:]:
        bare, daphne = results[f"bare {n}"], results[f"daphne {n}"]
        for key in (f"ridecast ws-port sim {n}", f"ridecast ws-port all {n}",
                    f"ridecast http-port sim {n}"):
            r = results[key]
            print(f"  {key:<32} {r.rate / bare.rate:5.2f}x bare websockets   "
                  f"{r.rate / max(daphne.rate, 1e-9):7.1f}x daphne+channels")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "_bare":
        bare_main(int(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "_daphne":
        daphne_main(int(sys.argv[2]))
    else:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--quick", action="store_true", help="1 and 100 subscribers only")
        parser.add_argument("--smoke", action="store_true",
                            help="like --quick with a fortieth of the events: checks it runs")
        parser.add_argument("--latency-only", action="store_true",
                            help="only the paced latency runs of ridecast")
        args = parser.parse_args()
        main(40 if args.smoke else 4 if args.quick else 1, latency_only=args.latency_only)
