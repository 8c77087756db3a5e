"""Webhook delivery throughput and latency, against the same receiver's ceiling.

Runs on 127.0.0.1 only, bounded in count and time::

    python bench/webhooks.py                 # 20,000 events over 16 simulations, concurrency 16
    python bench/webhooks.py --events 5000 --sims 8 --concurrency 8
    python bench/webhooks.py --webhook-workers 2   # delivered by two ``ridecast worker``s
    python bench/webhooks.py --repeat 5      # five rounds: the medians of PostgreSQL / SQLite

1. A fast receiver (``ridecast.cli.receiver.Receiver``) runs in its own process and
   records, per request, the time from the event's ``server_ts`` (stamped at ingest) to
   receipt.
2. Clients: our ``webhooks/http11.py`` pool, the same pool with its predecessor's
   connection on asyncio streams (``bench/_streams_http11.py``, kept as a reference),
   aiohttp's client and httpcore, each keep-alive with ``--clients-connections`` (8)
   connections, post the same signed envelope to the same receiver; deliveries/s and client
   CPU per delivery, with ratios (issue 14: a maintained library within 20% of http11.py
   should replace it). ``--clients-only`` stops there.
3. Ceiling: a plain keep-alive httpx client, then a raw keep-alive asyncio client, each with
   ``--concurrency`` connections, blast the receiver with the same body; the higher rate is
   the ceiling (the most requests/s this receiver takes from one Python process).
4. The naive durable pipeline (``bench/_webhook_naive.py``; ``--no-naive`` skips it): the
   same burst, ingested and delivered durably the way a first version would (json +
   aiosqlite, a commit per ingest request with the events and their delivery rows, claims
   of 256 rows, a commit per recorded attempt, ``--concurrency`` senders on the same
   ``http11.py`` pool), on its own SQLite file; deliveries/s as ridecast's below, its CPU
   per delivery, and its ratio to the lean reference. The lean reference does half the
   job (no ingest, nothing durable); this one does all of it, as ridecast does, and each
   SQLite mode below gives its ratio to it.
5. ridecast: a ``ridecast serve`` process (its own SQLite file; then the same on a fresh
   PostgreSQL database, unless ``--postgres ''``) with a webhook to the
   receiver; events are POSTed in batches; every one is a durable outbox delivery. Reported:
   deliveries/s (first ingest to last receipt, and to the last attempt committed as
   succeeded), the deliveries received while the burst was still being ingested and after
   it (each with its rate: the server's one event loop does both at first), p50/p99
   ingest-to-receipt latency, and the ratios to the ceiling and to the
   lean reference: the faster of ``http11.py`` and the raw streams client (so that a change
   to our own client can never weaken the reference), measured again just before and just
   after each mode (this VM's speed drifts within a run: the ratio is to the mean of those
   two).
6. Step 5 runs twice on each store, in the same server, side by side: ``ordered`` (the default: one
   request in flight per simulation, so ``--sims`` lanes run in parallel) and ``unordered``
   (``messaging_webhook_ordering: "unordered"``: chunks of one URL in parallel). The
   receiver counts inversions of event order within each simulation.
7. Where each burst's wall time went (Linux's schedstat): the share in which the server's
   event loop ran, or was ready but waited for one of the two cores (the receiver, the load
   generator and SQLite's driver threads share them), the share its other threads ran
   (aiosqlite's; none on PostgreSQL, whose work is in its own processes), and the same for
   the receiver. A loop waiting for a core moves no delivery. And the share of the cores'
   time that was idle during the burst, beside the same share during the lean reference's
   runs just before and after it. Cores left idle during a burst say that the two cores'
   total is not what bounds the rate: a process is waiting for another, or one thread is
   (the server's event loop, whose Python work no second core can share under the GIL).
8. ``--thread-states``: what the server's event loop thread was doing through each burst,
   sampled each millisecond from /proc: on a core or ready for one, asleep in
   ``epoll_wait`` (nothing to do), asleep on a futex (the GIL) or elsewhere.
9. ``--webhook-workers N``: the server runs with ``RIDECAST_WEBHOOK_WORKERS=false`` and N
   ``ridecast worker`` processes on the same store deliver (docs/deployment.md); the
   server CPU line then sums the server and the workers, and each worker's share of the
   burst on the cores is printed too. With the embedded in-process bus the workers hear of
   new rows through their outbox watch (the newest delivery id, read every 10 ms).
10. On PostgreSQL, the CPU its own processes (the server and the backends) spent through
    each burst, per delivery, beside the server's: the store's work is theirs there, where
    on SQLite it runs in the server's threads.
11. ``--repeat N``: step 5 N times, SQLite then PostgreSQL in each round, each round on new
    databases. At the end, per mode, PostgreSQL over SQLite for the CPU per delivery (the
    server's, its workers' and PostgreSQL's processes') and for the p99 at the steady rate:
    each round's ratio and their median. One round's CPU ratio ranged 1.16-1.93 on this
    2-core VM for the same code (docs/performance.md): judge a change by the median.
12. The steady phase's latency split by the server's own histograms (``/metrics`` read
    before and after it): the mean ingest request, group commit, claim transaction and
    attempt, with their counts. An event waits for one group commit and at least one claim
    before its first request. Claims made by ``ridecast worker`` processes are not in the
    server's figures, so with ``--webhook-workers`` the claim and attempt means are left
    out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from _load import basic_auth, create_pg_database, drop_pg_database, make_user
from prometheus_client.parser import text_string_to_metric_families

NOW = "2026-11-22T03:00:00+00:00"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def event(i: int) -> dict[str, object]:
    return {"agent_type": "vehicle", "message_type": "vehicle_use",
            "data": {"vehicle_id": i, "action": "disabled"},
            "current_sim_ts": NOW, "transmit_to_websocket": True}


# ---- the receiver process -------------------------------------------------------------------

def receiver_child(port: int) -> None:
    """Serve on ``port``: POST /hook records; GET /stats and POST /reset control it."""
    from ridecast.cli.receiver import Receiver, Reply, Request

    state: dict[str, list[float]] = {"latency": [], "times": []}
    order: dict[int, list[int]] = {}

    def handle(request: Request) -> Reply:
        if request.target == "/count":  # polled while waiting: a few bytes, not the latencies
            return Reply(200, json.dumps({"count": len(state["times"])}).encode())
        if request.target == "/stats":
            inversions = sum(1 for seq in order.values()
                             for a, b in itertools.pairwise(seq) if b < a)
            body = json.dumps({"count": len(state["times"]),
                               "last": max(state["times"], default=0.0),
                               "times": state["times"],
                               "latency": state["latency"],
                               "inversions": inversions}).encode()
            return Reply(200, body)
        if request.target == "/reset":
            state["latency"].clear()
            state["times"].clear()
            order.clear()
            return Reply(204)
        now = time.time()
        state["times"].append(now)
        envelope = json.loads(request.body)
        event_id = int(request.headers.get("webhook-id", "msg_0").removeprefix("msg_"))
        order.setdefault(int(envelope.get("simulation_id", 0)), []).append(event_id)
        ts = envelope.get("server_ts")
        if ts:
            state["latency"].append(now - datetime.fromisoformat(ts).timestamp())
        return Reply(204)

    async def run() -> None:
        server = Receiver(handle, port=port)
        await server.start()
        print("READY", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


# ---- phases ---------------------------------------------------------------------------------

async def ceiling(url: str, body: bytes, total: int, concurrency: int) -> float:
    """Requests/s a plain keep-alive httpx client gets from the receiver."""
    headers = {"content-type": "application/json"}
    left = total

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            response = await client.post(url, content=body, headers=headers)
            assert response.status_code == 204

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        return total / (time.perf_counter() - start)


async def raw_ceiling(port: int, body: bytes, total: int, concurrency: int) -> float:
    """Requests/s from a minimal keep-alive asyncio client (raw HTTP/1.1, no library)."""
    request = (b"POST /hook HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\n\r\n%s" % (len(body), body))
    left = total

    async def worker() -> None:
        nonlocal left
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while left > 0:
            left -= 1
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 204")
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - start)


CLIENTS = ("http11.py", "streams", "aiohttp", "httpcore")
LEAN = ("http11.py", "streams")  # the reference: the faster of these two


async def client_rate(kind: str, port: int, body: bytes, total: int,
                      connections: int) -> tuple[float, float]:
    """(deliveries/s, client CPU µs per delivery) of one HTTP client library, keep-alive with
    ``connections`` connections, posting the same signed envelope to the same receiver."""
    from _streams_http11 import StreamsPool

    from ridecast.events.signing import sign_headers
    from ridecast.webhooks.http11 import Pool

    url = f"http://127.0.0.1:{port}/hook"
    headers = {"content-type": "application/json", "user-agent": "ridecast/bench",
               **sign_headers("whsec_" + "A" * 32, "msg_1", int(time.time()), body)}
    left = total

    if kind in LEAN:
        # Both lean clients have the same interface: a pool posting a request built once.
        pool = (Pool if kind == "http11.py" else StreamsPool)(connect_timeout_s=5)
        head = ["POST /hook HTTP/1.1", f"host: 127.0.0.1:{port}",
                f"content-length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body

        async def one() -> int:
            answer = await pool.post("http", "127.0.0.1", port, "127.0.0.1", request, 1024)
            return answer.status

        async def close() -> None:
            await pool.close()
    elif kind == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections, limit_per_host=connections),
            cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)

        async def one() -> int:
            async with session.post(url, data=body, headers=headers,
                                    allow_redirects=False) as response:
                await response.content.read(1024)
                return response.status

        async def close() -> None:
            await session.close()
    else:
        import httpcore

        hc = httpcore.AsyncConnectionPool(max_connections=connections)
        hc_headers = [(k.encode(), v.encode()) for k, v in headers.items()]
        hc_headers.append((b"content-length", str(len(body)).encode()))

        async def one() -> int:
            async with hc.stream("POST", url, headers=hc_headers, content=body) as response:
                async for _chunk in response.aiter_stream():
                    break
                return response.status

        async def close() -> None:
            await hc.aclose()

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            status = await one()
            assert status == 204, status

    try:
        cpu0, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    finally:
        await close()
    return total / wall, cpu / total * 1e6


def compare_clients(port: int, body: bytes, total: int, connections: int,
                    rounds: int = 2) -> dict[str, tuple[float, float]]:
    """Each client ``rounds`` times, interleaved (warm-up first); the best round of each."""
    best: dict[str, tuple[float, float]] = {}
    for kind in CLIENTS:  # warm-up: imports, first connections
        asyncio.run(client_rate(kind, port, body, min(200, total), connections))
    for _ in range(rounds):
        for kind in CLIENTS:
            rate, cpu_us = asyncio.run(client_rate(kind, port, body, total, connections))
            if kind not in best or rate > best[kind][0]:
                best[kind] = (rate, cpu_us)
    return best


def reference_rate(port: int, body: bytes, args: argparse.Namespace
                   ) -> tuple[float, float | None]:
    """The lean reference's deliveries/s to the receiver: the faster of ``LEAN``, each the
    best of two, as in ``compare_clients``; and the share of the cores idle meanwhile."""
    idle_before = cpu_idle()
    rate = max(asyncio.run(client_rate(kind, port, body, args.clients_events,
                                       args.clients_connections))[0]
               for _ in range(2) for kind in LEAN)
    idle = idle_share(idle_before, cpu_idle())
    httpx.post(f"http://127.0.0.1:{port}/reset")
    return rate, idle


def print_clients(best: dict[str, tuple[float, float]], total: int, connections: int) -> None:
    print(f"webhook HTTP clients: {total} deliveries each (best of 2), keep-alive, "
          f"{connections} connections, same receiver, same signed envelope")
    for kind, (rate, cpu_us) in best.items():
        print(f"  {kind:<10} {rate:8,.0f} deliveries/s   client CPU {cpu_us:6.0f} µs/delivery")
    ours = best["http11.py"]
    for kind in CLIENTS[1:]:
        rate, cpu_us = best[kind]
        print(f"  http11.py / {kind} = {ours[0] / rate:.2f} (deliveries/s)   "
              f"{kind} CPU / http11.py CPU = {cpu_us / ours[1]:.2f}")


async def create_user(database_url: str) -> tuple[str, str]:
    """The user ``bench`` of a migrated store, as (name, API key)."""
    return "bench", await make_user(database_url)


async def ingest(port: int, auth: tuple[str, str], sims: list[int], total: int,
                 batch: int) -> float:
    """POST ``total`` events in batches spread over ``sims``, 4 requests in flight; returns
    the start time. A lean load generator (raw HTTP/1.1 over keep-alive connections, every
    request built before the clock starts), as ``bench/ingest.py``'s. httpx spent 8-11 µs
    of CPU per event here, this 2.5-4.5 µs with the bodies built (three runs of 20,000
    each), on the two cores that the server and the receiver share."""
    authorization = basic_auth(*auth)
    requests = []
    for n, s in enumerate(range(0, total, batch)):
        body = json.dumps([event(i) for i in range(s, min(s + batch, total))]).encode()
        requests.append(
            (f"POST /api/v2/simulation/{sims[n % len(sims)]}/events HTTP/1.1\r\n"
             f"host: 127.0.0.1\r\ncontent-type: application/json\r\n"
             f"authorization: {authorization}\r\ncontent-length: {len(body)}\r\n\r\n"
             ).encode() + body)
    requests.reverse()  # popped from the end: sent in order
    start = time.time()

    async def poster() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while requests:
                writer.write(requests.pop())
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                answer = await reader.readexactly(length) if length else b""
                if not head.startswith(b"HTTP/1.1 201"):
                    raise RuntimeError(f"ingest refused: {head[:40]!r} {answer[:200]!r}")
        finally:
            writer.close()

    await asyncio.gather(*(poster() for _ in range(4)))
    return start


async def paced(base: str, auth: tuple[str, str], sim: int, rate: int, seconds: float) -> int:
    """POST events at ``rate``/s (batches of rate/20 every 50 ms); returns how many."""
    per_tick = max(1, rate // 20)
    sent = 0
    async with httpx.AsyncClient(base_url=base, auth=auth, timeout=60) as http:
        start = time.perf_counter()
        tick = 0
        while time.perf_counter() - start < seconds:
            response = await http.post(f"/api/v2/simulation/{sim}/events",
                                       json=[event(i) for i in range(per_tick)])
            response.raise_for_status()
            sent += per_tick
            tick += 1
            await asyncio.sleep(max(0.0, start + tick * 0.05 - time.perf_counter()))
    return sent


async def succeeded_at(database_url: str, total: int, deadline: float) -> float | None:
    # ``total``: succeeded deliveries in the whole store (phases add up).
    """When the last delivery was recorded as succeeded (polling the store).

    The poll reads the deliveries still to send from their partial indexes (the depth
    gauge's statement), and counts the succeeded ones only when none is left: a count of
    every succeeded row each 50 ms read the whole table on PostgreSQL, whose backends'
    CPU this bench counts as ridecast's (3-13 µs a delivery, growing with the table)."""
    from sqlalchemy import func, select, text

    from ridecast.store.engine import create_engine
    from ridecast.store.outbox import outbox_sql
    from ridecast.store.tables import webhook_deliveries as d

    engine = create_engine(database_url)
    left_sql = text(outbox_sql(engine.dialect.name).depth_sql)
    try:
        while time.time() < deadline:
            async with engine.connect() as conn:
                done = None
                if not await conn.scalar(left_sql):
                    done = await conn.scalar(
                        select(func.count()).select_from(d).where(d.c.status == "succeeded"))
            if done == total:
                return time.time()
            await asyncio.sleep(0.05)
    finally:
        await engine.dispose()
    return None


async def count_succeeded(database_url: str) -> int:
    from sqlalchemy import func, select

    from ridecast.store.engine import create_engine
    from ridecast.store.tables import webhook_deliveries as d

    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return int(await conn.scalar(
                select(func.count()).select_from(d).where(d.c.status == "succeeded")) or 0)
    finally:
        await engine.dispose()


# The server's histograms the steady phase is split by (``store_parts``): its ingest
# requests, the event log's group commits, its webhook claims and the attempts it sent.
PARTS = (("ingest request", "ridecast_ingest_seconds"),
         ("group commit", "ridecast_eventlog_commit_seconds"),
         ("claim transaction", "ridecast_webhook_claim_seconds"),
         ("attempt", "ridecast_webhook_attempt_seconds"))


def histogram_totals(base: str) -> dict[str, tuple[float, float]]:
    """(count, sum) of each of ``PARTS``' histograms in the server's /metrics now."""
    names = {name for _label, name in PARTS}
    totals: dict[str, tuple[float, float]] = {}
    for family in text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=30).text):
        if family.name in names:
            samples = {sample.name: sample.value for sample in family.samples}
            totals[family.name] = (samples[f"{family.name}_count"],
                                   samples[f"{family.name}_sum"])
    return totals


def store_parts(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]],
                ) -> list[tuple[str, float, int]]:
    """(label, mean ms, count) of each of ``PARTS`` observed between two
    ``histogram_totals``; a part the server did not observe (claims made by
    ``ridecast worker`` processes) is left out."""
    parts: list[tuple[str, float, int]] = []
    for label, name in PARTS:
        if name in before and name in after:
            count = after[name][0] - before[name][0]
            if count > 0:
                parts.append((label, (after[name][1] - before[name][1]) / count * 1e3,
                              int(count)))
    return parts


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def processes_cpu_s(pids: Sequence[int]) -> float | None:
    """``process_cpu_s`` summed over ``pids`` (None if any is unknown)."""
    total = 0.0
    for pid in pids:
        cpu = process_cpu_s(pid)
        if cpu is None:
            return None
        total += cpu
    return total


class ThreadStates:
    """Samples what the server's event loop thread is doing, every ``interval_s``, from
    /proc (Linux; nothing elsewhere): on a core or ready for one (``R``), asleep in
    ``epoll_wait`` (nothing to do until a socket or another thread wakes it), asleep on a
    futex (the GIL, or a lock), or asleep elsewhere. ``--thread-states``: the sampling
    thread costs this process some CPU, on the same two cores."""

    def __init__(self, pid: int, interval_s: float = 0.001) -> None:
        self._pid = pid
        self._interval_s = interval_s
        self.samples: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ThreadStates:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        task = f"/proc/{self._pid}/task/{self._pid}"
        while not self._stop.wait(self._interval_s):
            try:
                with open(f"{task}/stat") as stat:
                    state = stat.read().rsplit(")", 1)[1].split()[0]
                with open(f"{task}/wchan") as wchan:
                    where = wchan.read()
            except OSError:
                return  # the server has gone
            kind = ("on a core or ready" if state == "R" else
                    "asleep in epoll_wait" if "epoll" in where else
                    "asleep on a futex (the GIL, a lock)" if "futex" in where else
                    "asleep elsewhere")
            self.samples.append((time.time(), kind))

    def shares(self, since: float = 0.0, until: float = float("inf")) -> str:
        """The share of each state among the samples taken from ``since`` to ``until``."""
        counts: dict[str, int] = {}
        for at, kind in self.samples:
            if since <= at <= until:
                counts[kind] = counts.get(kind, 0) + 1
        total = sum(counts.values())
        if not total:
            return "no samples (not Linux?)"
        return "; ".join(f"{kind} {count / total:.0%}" for kind, count
                         in sorted(counts.items(), key=lambda kv: -kv[1])) + (
            f" ({total:,} samples)")


def sched_s(pid: int) -> dict[int, tuple[float, float]] | None:
    """Per thread of process ``pid``: (seconds run on a core, seconds runnable but waiting
    for one) so far, from Linux's schedstat (None elsewhere)."""
    out: dict[int, tuple[float, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            ran, waited, _slices = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except (OSError, ValueError):
            continue  # the thread ended, or no schedstat in this kernel
        out[int(tid)] = (int(ran) / 1e9, int(waited) / 1e9)
    return out or None


def cpu_idle() -> tuple[int, int] | None:
    """(idle, total) clock ticks of every core so far, from Linux's /proc/stat (None
    elsewhere); iowait counts as idle."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:]]
    return ticks[3] + ticks[4], sum(ticks)


def postgres_cpu() -> dict[int, float]:
    """CPU seconds so far of every process named ``postgres`` on this machine (the server
    and its backends; Linux /proc, empty elsewhere). A backend that exits between two
    readings is missed, one that starts between them counts from zero; the bench's
    connections stay open through a burst."""
    out: dict[int, float] = {}
    if not Path("/proc/self").exists():
        return out
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
        except OSError:
            continue
        cpu = process_cpu_s(int(entry.name))
        if cpu is not None:
            out[int(entry.name)] = cpu
    return out


def idle_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the cores' time idle between two ``cpu_idle`` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def sched_shares(pid: int, before: dict[int, tuple[float, float]] | None,
                 after: dict[int, tuple[float, float]] | None, wall_s: float
                 ) -> tuple[float, float, float] | None:
    """Shares of ``wall_s`` between two ``sched_s`` readings: (the main thread ran, the main
    thread waited for a core, the other threads ran)."""
    if before is None or after is None or wall_s <= 0 or pid not in after:
        return None
    ran = {tid: r - before.get(tid, (0.0, 0.0))[0] for tid, (r, _w) in after.items()}
    waited = after[pid][1] - before.get(pid, (0.0, 0.0))[1]
    others = sum(r for tid, r in ran.items() if tid != pid)
    return ran[pid] / wall_s, waited / wall_s, others / wall_s


def start_worker(env: dict[str, str], cwd: Path, log: Path,
                 timeout_s: float = 60.0) -> subprocess.Popen[bytes]:
    """A ``ridecast worker`` on the server's store, once it says it is delivering."""
    with log.open("wb") as out:  # the child keeps its own descriptor
        worker = subprocess.Popen(
            [sys.executable, "-m", "ridecast.cli.main", "worker"],
            env={**env, "RIDECAST_WEBHOOK_WORKERS": "true", "RIDECAST_LOG_LEVEL": "info"},
            cwd=cwd, stdout=subprocess.DEVNULL, stderr=out)
    deadline = time.monotonic() + timeout_s
    while b"webhook worker running" not in log.read_bytes():
        if worker.poll() is not None or time.monotonic() > deadline:
            worker.kill()
            raise RuntimeError(f"ridecast worker did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return worker


def stop_all(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """Terminate ``processes`` and wait for each."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(20)


def wait_count(rport: int, count: int, deadline: float) -> None:
    """Until the receiver has ``count`` requests (or ``deadline``). It polls ``/count``, not
    ``/stats``: ``/stats`` dumps every latency so far as JSON (12 ms of the receiver's CPU
    at 20,000), and ten of those a second took CPU from the receiver during ridecast's
    runs that the reference's runs never paid."""
    while time.time() < deadline:
        if httpx.get(f"http://127.0.0.1:{rport}/count", timeout=30).json()["count"] >= count:
            return
        time.sleep(0.1)


def run_mode(base: str, auth: tuple[str, str], rport: int, hook: str, database_url: str,
             args: argparse.Namespace, mode: str, server_pid: int,
             receiver_pid: int, worker_pids: Sequence[int] = ()) -> dict[str, object]:
    """One burst and one paced phase through ``args.sims`` simulations in ``mode``."""
    done_before = asyncio.run(count_succeeded(database_url))
    data: dict[str, object] = {"messaging_webhook_url": hook,
                               "messaging_webhook_message_types": ["vehicle_use"],
                               "messaging_webhook_ordering": mode}
    sims = [httpx.post(f"{base}/api/v2/simulation", auth=auth,
                       json={"name": f"bench-{mode}-{i}", "data": data}).json()["id"]
            for i in range(args.sims)]
    httpx.post(f"http://127.0.0.1:{rport}/reset")
    deadline = time.time() + args.timeout
    cpu_before = processes_cpu_s([server_pid, *worker_pids])
    pg_before = postgres_cpu() if database_url.startswith("postgresql") else None
    sched_before = (sched_s(server_pid), sched_s(receiver_pid))
    workers_before = [sched_s(pid) for pid in worker_pids]
    idle_before = cpu_idle()
    states = ThreadStates(server_pid) if args.thread_states else contextlib.nullcontext()
    with states:
        start = asyncio.run(ingest(int(base.rsplit(":", 1)[1]), auth, sims, args.events,
                                   args.batch))
        ingested = time.time()
        wait_count(rport, args.events, deadline)
        stats: dict[str, Any] = httpx.get(f"http://127.0.0.1:{rport}/stats",
                                          timeout=30).json()
        committed = asyncio.run(succeeded_at(database_url, done_before + args.events,
                                             deadline))
    cpu_after = processes_cpu_s([server_pid, *worker_pids])
    pg_after = postgres_cpu() if pg_before is not None else {}
    sched_after = (sched_s(server_pid), sched_s(receiver_pid))
    workers_after = [sched_s(pid) for pid in worker_pids]
    idle = idle_share(idle_before, cpu_idle())
    burst_s = (committed or time.time()) - start
    worker_shares = [sched_shares(pid, before, after, burst_s) for pid, before, after
                     in zip(worker_pids, workers_before, workers_after, strict=True)]
    httpx.post(f"http://127.0.0.1:{rport}/reset")
    totals_before = histogram_totals(base)
    paced_sent = asyncio.run(paced(base, auth, sims[0], args.paced_rate, args.paced_s))
    wait_count(rport, paced_sent, deadline + 30)
    paced_parts = store_parts(totals_before, histogram_totals(base))
    paced_stats: dict[str, object] = httpx.get(f"http://127.0.0.1:{rport}/stats",
                                               timeout=30).json()
    received = receipts(stats, start, ingested)
    return {
        "mode": mode, **received,
        "durable": args.events / (committed - start) if committed else None,
        "latency": [float(x) for x in stats.get("latency", [])],
        "inversions": stats.get("inversions"),
        "paced": [float(x) for x in paced_stats.get("latency", [])],  # type: ignore[attr-defined]
        "paced_inversions": paced_stats.get("inversions"),
        # Where the steady phase's latency goes, by the server's own histograms.
        "paced_parts": paced_parts,
        # The server's CPU for the burst, its ingest included (the bench's polling of the
        # store for the last commit runs in this process, not the server's).
        "server_cpu_s": (cpu_after - cpu_before
                         if cpu_before is not None and cpu_after is not None else None),
        # PostgreSQL's own processes over the same burst (None on SQLite, whose work is in
        # the server's threads).
        "postgres_cpu_s": (sum(cpu - pg_before.get(pid, 0.0) for pid, cpu in pg_after.items())
                           if pg_before else None),
        # Where the burst's wall time went on the 2 cores (``print_sched``).
        "server_sched": sched_shares(server_pid, sched_before[0], sched_after[0], burst_s),
        "receiver_sched": sched_shares(receiver_pid, sched_before[1], sched_after[1],
                                       burst_s),
        # The same for each ``ridecast worker`` (``--webhook-workers``).
        "worker_sched": worker_shares,
        # Up to the last receipt (not the last commit the bench then waits for).
        "thread_states": ((states.shares(since=start, until=ingested),
                           states.shares(since=ingested, until=received["last"]))
                          if isinstance(states, ThreadStates) else None),
        "idle": idle,
    }


def run_naive(args: argparse.Namespace, rport: int, hook: str, tmp: Path) -> dict[str, object]:
    """The same burst through the naive durable pipeline (``_webhook_naive.py``, its own
    SQLite file, ``--concurrency`` senders): deliveries/s from the first ingest to the last
    receipt, as ``run_mode`` measures ridecast, and its CPU per delivery."""
    port = free_port()
    with (tmp / "naive.log").open("wb") as log:  # the child keeps its own descriptor
        naive = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("_webhook_naive.py")), str(port),
             str(tmp / "naive.db"), hook, str(args.concurrency)],
            stdout=subprocess.DEVNULL, stderr=log)
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {(tmp / 'naive.log').read_text()[-2000:]}") from None
        httpx.post(f"http://127.0.0.1:{rport}/reset")
        cpu_before, idle_before = process_cpu_s(naive.pid), cpu_idle()
        start = asyncio.run(ingest(port, ("naive", "naive"), list(range(1, args.sims + 1)),
                                   args.events, args.batch))
        ingested = time.time()
        wait_count(rport, args.events, time.time() + args.timeout)
        stats: dict[str, Any] = httpx.get(f"http://127.0.0.1:{rport}/stats", timeout=30).json()
        cpu_after, idle = process_cpu_s(naive.pid), idle_share(idle_before, cpu_idle())
    finally:
        stop_all([naive])
    httpx.post(f"http://127.0.0.1:{rport}/reset")
    return {
        **receipts(stats, start, ingested),
        "cpu_s": (cpu_after - cpu_before
                  if cpu_before is not None and cpu_after is not None else None),
        "idle": idle,
    }


def receipts(stats: dict[str, Any], start: float, ingested: float) -> dict[str, Any]:
    """What the receiver's ``/stats`` says of a burst that started at ``start`` and was all
    posted by ``ingested``: deliveries, the last receipt, deliveries/s from the first
    ingest to the last receipt, and the deliveries received while the producer was still
    posting (the rest came after)."""
    count, last = int(stats.get("count", 0)), float(stats.get("last", 0.0))
    return {"count": count, "start": start, "ingested": ingested, "last": last,
            "rate": count / (last - start) if last > start else 0.0,
            "during_ingest": sum(1 for t in stats.get("times", []) if t <= ingested)}


def print_phases(count: int, during: int, start: float, ingested: float, last: float) -> None:
    """The deliveries received while the burst was being ingested, and after it."""
    ingest_s, tail_s = ingested - start, last - ingested
    if ingest_s > 0 and tail_s > 0:
        print(f"  while the burst was being ingested ({ingest_s:.2f} s): {during:,} "
              f"delivered, {during / ingest_s:,.0f}/s; after it ({tail_s:.2f} s): "
              f"{count - during:,} delivered, {(count - during) / tail_s:,.0f}/s")


def cpu_per_delivery_us(result: dict[str, object], events: int) -> float | None:
    """µs of CPU per delivery: the server's and its workers', plus PostgreSQL's processes."""
    server, postgres = result["server_cpu_s"], result["postgres_cpu_s"]
    if server is None:
        return None
    return (float(server) + float(postgres or 0.0)) * 1e6 / events  # type: ignore[arg-type]


def print_store_ratios(results: list[dict[str, object]], modes: list[str],
                       events: int) -> None:
    """PostgreSQL over SQLite per mode: each round's ratio (the two runs minutes apart) and
    the median of the rounds, for the CPU per delivery and for the p99 at a steady rate."""
    for mode in modes:
        cpu: list[float] = []
        p99: list[float] = []
        for round_ in sorted({int(r["round"]) for r in results}):  # type: ignore[call-overload]
            pair = {r["store"]: r for r in results if r["kind"] == mode and r["round"] == round_}
            if set(pair) != {"SQLite", "PostgreSQL"}:
                continue
            lite, pg = pair["SQLite"], pair["PostgreSQL"]
            lite_cpu, pg_cpu = cpu_per_delivery_us(lite, events), cpu_per_delivery_us(pg, events)
            if lite_cpu and pg_cpu is not None:
                cpu.append(pg_cpu / lite_cpu)
            lite_paced, pg_paced = lite["paced"], pg["paced"]
            if isinstance(lite_paced, list) and isinstance(pg_paced, list) and lite_paced \
                    and pg_paced:
                p99.append(pct(pg_paced, 0.99) / pct(lite_paced, 0.99))
        for name, ratios in (("CPU per delivery (server and PostgreSQL's processes)", cpu),
                             ("p99 at the steady rate", p99)):
            if ratios:
                rounds = ", ".join(f"{x:.2f}" for x in ratios)
                median = statistics.median(ratios)
                print(f"PostgreSQL / SQLite, {mode}, {name}: median {median:.2f} of "
                      f"{len(ratios)} round{'s' if len(ratios) != 1 else ''} ({rounds})")


def run_stores(args: argparse.Namespace, stores: list[tuple[str, str]], modes: list[str],
               rport: int, sport: int, hook: str, body: bytes, tmp: Path, receiver_pid: int,
               round_: int, results: list[dict[str, object]]) -> None:
    """One round: each store's server (and workers) through each mode, appending to
    ``results``; every process it starts is stopped before it returns."""
    for store, url in stores:
        auth = asyncio.run(create_user(url))
        env = {**os.environ, "RIDECAST_DATABASE_URL": url,
               "RIDECAST_WEBHOOK_ALLOW_PRIVATE": "true", "RIDECAST_LOG_LEVEL": "warning",
               "RIDECAST_WEBHOOK_CONCURRENCY_PER_ENDPOINT": str(args.concurrency)}
        server = subprocess.Popen(
            [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(sport)],
            env={**env,
                 "RIDECAST_WEBHOOK_WORKERS": "false" if args.webhook_workers else "true"},
            cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        workers: list[subprocess.Popen[bytes]] = []
        try:
            base = f"http://127.0.0.1:{sport}"
            wait_http(f"{base}/healthz")
            # The deployment docs/deployment.md describes: the server delivers no webhook,
            # ``ridecast worker`` processes on the same store do (after it has migrated it).
            workers = [start_worker(env, tmp, tmp / f"worker-{n}.log")
                       for n in range(args.webhook_workers)]
            for mode in modes:
                # The reference again just before and just after this mode: this VM's speed
                # drifts within a run, and the ratio is to what it did around this mode.
                before = reference_rate(rport, body, args)
                result = run_mode(base, auth, rport, hook, url, args, mode, server.pid,
                                  receiver_pid, [w.pid for w in workers])
                after = reference_rate(rport, body, args)
                label = f"{store}, {mode}" + (f" (round {round_ + 1})" if args.repeat > 1
                                              else "")
                results.append({**result, "mode": label, "store": store, "kind": mode,
                                "round": round_, "reference": (before[0], after[0]),
                                "reference_idle": (before[1], after[1])})
        finally:
            stop_all([server, *workers])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sims", type=int, default=16,
                        help="simulations the events are spread over (ordered: one lane each)")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--paced-rate", type=int, default=1000,
                        help="events/s of the unsaturated latency phase")
    parser.add_argument("--paced-s", type=float, default=3.0)
    parser.add_argument("--clients-events", type=int, default=10000,
                        help="deliveries per HTTP client in the client comparison")
    parser.add_argument("--clients-connections", type=int, default=8)
    parser.add_argument("--webhook-workers", type=int, default=0,
                        help="deliver from this many `ridecast worker` processes beside the "
                        "server (started with RIDECAST_WEBHOOK_WORKERS=false) instead of "
                        "from the server itself")
    parser.add_argument("--modes", default="ordered,unordered",
                        help="delivery modes to run, comma-separated (default: both)")
    parser.add_argument("--thread-states", action="store_true",
                        help="sample the server's event loop thread's state during each "
                             "burst (Linux /proc; costs this process CPU)")
    parser.add_argument("--naive", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the burst through the naive durable pipeline "
                        "(bench/_webhook_naive.py), SQLite, before ridecast's modes")
    parser.add_argument("--clients-only", action="store_true",
                        help="only the comparison of HTTP clients (http11.py, aiohttp, httpcore)")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin URL of a PostgreSQL server: the same runs on a database "
                        "created there, beside SQLite ('' to skip)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every store and mode this many times, the stores "
                        "alternating, each round on fresh databases; then print the medians "
                        "of the PostgreSQL / SQLite ratios (one run's ratio varies by a "
                        "third on a 2-core VM)")
    parser.add_argument("--receiver-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receiver_child:
        receiver_child(args.receiver_child)
        return

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    if not modes or set(modes) - {"ordered", "unordered"}:
        parser.error("--modes: a comma-separated list of 'ordered' and 'unordered'")
    rport, sport = free_port(), free_port()
    hook = f"http://127.0.0.1:{rport}/hook"
    receiver = subprocess.Popen([sys.executable, __file__, "--receiver-child", str(rport)],
                                stdout=subprocess.PIPE, text=True)
    tmp = Path(tempfile.mkdtemp(prefix="ridecast-bench-"))
    pg_db = f"ridecast_bench_webhooks_{os.getpid()}"
    postgres = bool(args.postgres) and not args.clients_only
    pg_dbs: list[str] = []
    results: list[dict[str, object]] = []
    try:
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "READY"
        body = json.dumps({"simulation_id": 1, **event(1), "server_ts": NOW}).encode()
        # httpx needs ~1 ms of CPU per request here: a few thousand requests measure it.
        asyncio.run(ceiling(hook, body, min(500, args.events), args.concurrency))  # warm-up
        httpx_rps = asyncio.run(ceiling(hook, body, min(3000, args.events), args.concurrency))
        raw_rps = asyncio.run(raw_ceiling(rport, body, args.events, args.concurrency))
        ceiling_rps = max(httpx_rps, raw_rps)
        clients = compare_clients(rport, body, args.clients_events, args.clients_connections)
        httpx.post(f"http://127.0.0.1:{rport}/reset")
        if args.clients_only:
            print_clients(clients, args.clients_events, args.clients_connections)
            return

        naive: dict[str, object] | None = None
        if args.naive:
            before = reference_rate(rport, body, args)
            naive = run_naive(args, rport, hook, tmp)
            after = reference_rate(rport, body, args)
            naive["reference"] = (before[0], after[0])

        for round_ in range(args.repeat):
            # Each round on new databases: a second run on the first's tables would read
            # their dead row versions (this machine's PostgreSQL has autovacuum off).
            stores = [("SQLite", f"sqlite+aiosqlite:///{tmp / f'bench-{round_}.db'}")]
            if postgres:
                pg_dbs.append(f"{pg_db}_{round_}")
                pg_url = create_pg_database(args.postgres, pg_dbs[-1])
                if pg_url is None:
                    postgres = False
                else:
                    stores.append(("PostgreSQL", pg_url))
            run_stores(args, stores, modes, rport, sport, hook, body, tmp, receiver.pid,
                       round_, results)
    finally:
        receiver.terminate()
        receiver.wait(10)
        for name in pg_dbs:
            drop_pg_database(args.postgres, name)
    print(f"events: {args.events} over {args.sims} simulations  concurrency per endpoint: "
          f"{args.concurrency}  cpus: {os.cpu_count()}")
    print(f"receiver ceiling, plain keep-alive httpx client: {httpx_rps:,.0f} req/s")
    print(f"receiver ceiling, raw keep-alive asyncio client: {raw_rps:,.0f} req/s")
    print_clients(clients, args.clients_events, args.clients_connections)
    if naive is not None:
        print("--- naive durable pipeline, SQLite (bench/_webhook_naive.py: json + aiosqlite, "
              "a commit per ingest request, claims of 256, a commit per recorded attempt, "
              f"{args.concurrency} senders on the same http11.py pool) ---")
        naive_rate = float(naive["rate"])  # type: ignore[arg-type]
        print(f"naive: {naive['count']}/{args.events} delivered, {naive_rate:,.0f} "
              "deliveries/s (first ingest to last receipt)")
        print_phases(int(naive["count"]), int(naive["during_ingest"]),  # type: ignore[call-overload]
                     float(naive["start"]), float(naive["ingested"]),  # type: ignore[arg-type]
                     float(naive["last"]))  # type: ignore[arg-type]
        if naive["cpu_s"] is not None:
            print(f"naive CPU: {float(naive['cpu_s']) * 1e6 / args.events:,.0f} µs per "  # type: ignore[arg-type]
                  f"delivery (ingest included); cores idle: {naive['idle']:.0%} of the burst")
        before, after = naive["reference"]  # type: ignore[misc]
        print(f"naive / lean reference (measured just before and after: {before:,.0f} and "
              f"{after:,.0f}/s): {naive_rate / ((before + after) / 2):.2f}")
    for r in results:
        print(f"--- {r['mode']} ---")
        start, ingested = float(r["start"]), float(r["ingested"])  # type: ignore[arg-type]
        rate = float(r["rate"])  # type: ignore[arg-type]
        print(f"ingest: {args.events / (ingested - start):,.0f} events/s")
        print(f"ridecast: {r['count']}/{args.events} delivered, {rate:,.0f} deliveries/s "
              f"(first ingest to last receipt); inversions within a simulation: "
              f"{r['inversions']}")
        print_phases(int(r["count"]), int(r["during_ingest"]), start, ingested,  # type: ignore[call-overload]
                     float(r["last"]))  # type: ignore[arg-type]
        if r["durable"]:
            print(f"ridecast durable: {float(r['durable']):,.0f} deliveries/s "  # type: ignore[arg-type]
                  "(first ingest to last attempt committed as succeeded)")
        latency = r["latency"]
        assert isinstance(latency, list)
        if latency:
            print("latency ingest->receipt, saturated burst (queueing): "
                  f"p50 {pct(latency, 0.5) * 1000:,.1f} ms  "
                  f"p99 {pct(latency, 0.99) * 1000:,.1f} ms  mean "
                  f"{statistics.fmean(latency) * 1000:,.1f} ms")
        paced_latency = r["paced"]
        assert isinstance(paced_latency, list)
        if paced_latency:
            print(f"latency at a steady {args.paced_rate} events/s (one simulation): p50 "
                  f"{pct(paced_latency, 0.5) * 1000:,.1f} ms  p99 "
                  f"{pct(paced_latency, 0.99) * 1000:,.1f} ms; inversions "
                  f"{r['paced_inversions']}")
            parts = r["paced_parts"]
            assert isinstance(parts, list)
            if parts:
                print("  its parts in the server, means: " + ", ".join(
                    f"{label} {mean:.2f} ms ({count:,})" for label, mean, count in parts))
        cpu_s = r["server_cpu_s"]
        if cpu_s is not None:
            n = args.webhook_workers
            who = (f"ridecast serve and {n} webhook worker{'s' if n != 1 else ''}, ingest "
                   "included" if n else "ingest included")
            print(f"server CPU: {float(cpu_s) * 1e6 / args.events:,.0f} µs per delivery "  # type: ignore[arg-type]
                  f"({who}; the lean clients' CPU per delivery is above)")
        if r["postgres_cpu_s"] is not None:
            print(f"PostgreSQL's processes: {float(r['postgres_cpu_s']) * 1e6 / args.events:,.0f} "  # type: ignore[arg-type]
                  "µs of CPU per delivery, beside the server's")
        server_sched, receiver_sched = r["server_sched"], r["receiver_sched"]
        if isinstance(server_sched, tuple) and isinstance(receiver_sched, tuple):
            # The share of the burst each was on a core, or ready but waiting for one: time
            # waited is time no delivery of that process moved (2 cores for the server's
            # threads, the receiver and the load generator).
            print(f"burst on the cores: server event loop ran {server_sched[0]:.0%}, waited "
                  f"for a core {server_sched[1]:.0%}; server's other threads (SQLite's "
                  f"driver) ran {server_sched[2]:.0%}; receiver ran {receiver_sched[0]:.0%}, "
                  f"waited {receiver_sched[1]:.0%}")
        for n, shares in enumerate(r["worker_sched"], 1):  # type: ignore[arg-type]
            if shares is not None:
                print(f"  webhook worker {n}: event loop ran {shares[0]:.0%}, waited for a "
                      f"core {shares[1]:.0%}; its other threads (SQLite's driver) ran "
                      f"{shares[2]:.0%}")
        if r["thread_states"] is not None:
            during_states, after_states = r["thread_states"]  # type: ignore[misc]
            print(f"server event loop thread, sampled each ms, while ingesting: "
                  f"{during_states}; after: {after_states}")
        idle, ref_idle = r["idle"], r["reference_idle"]
        if isinstance(idle, float) and isinstance(ref_idle, tuple) and None not in ref_idle:
            # Idle cores during the burst: something other than the cores' total bounds it.
            print(f"cores idle: {idle:.0%} of the burst (the lean reference's runs just "
                  f"before and after: {ref_idle[0]:.0%} and {ref_idle[1]:.0%})")
        before, after = r["reference"]  # type: ignore[misc]
        adjacent = (before + after) / 2
        start_rate = max(clients[kind][0] for kind in LEAN)
        print(f"ratio to the lean reference (the faster of {' and '.join(LEAN)}, keep-alive, "
              f"{args.clients_connections} connections, same receiver) measured just before "
              f"and after this mode ({before:,.0f} and {after:,.0f}/s): {rate / adjacent:.2f}; "
              f"to its rate at the start of the run: {rate / start_rate:.2f}")
        print(f"ratio to ceiling (the higher of the two): {rate / ceiling_rps:.2f}")
        if naive is not None and str(r["mode"]).startswith("SQLite") and naive["rate"]:
            print(f"ratio to the naive durable pipeline (above, same burst, same receiver): "
                  f"{rate / float(naive['rate']):.2f}")  # type: ignore[arg-type]
    print_store_ratios(results, modes, args.events)


if __name__ == "__main__":
    main()
