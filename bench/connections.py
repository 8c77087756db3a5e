"""Idle-connection benchmark: memory per websocket stream and time to open them.

    python bench/connections.py               # 10,000 connections
    python bench/connections.py -n 2000       # fewer

Opens N idle, authenticated ``/simulation_events/{id}`` streams to one ridecast process on
127.0.0.1 (on the dedicated websocket port, then on the HTTP port), and the same number to
a bare ``websockets`` server for reference. Reports the server's RSS growth divided by N
and the time to open them all. Clients run in two separate processes (picows).
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
from pathlib import Path
from typing import Any

import httpx
import psutil
from _load import free_port, make_user, raise_nofile, say_changed_defaults

PROCS = 2


def client_main(url: str, n: int, opened: Any, stop: Any) -> None:
    """Open ``n`` connections, report, hold them until ``stop`` is set."""
    import picows

    raise_nofile()

    async def run() -> None:
        transports = []
        closed = [0]

        class Listener(picows.WSListener):  # type: ignore[misc]
            def on_ws_frame(self, transport: Any, frame: Any) -> None:
                if frame.msg_type == picows.WSMsgType.CLOSE:
                    closed[0] += 1

        for start in range(0, n, 200):
            batch = await asyncio.gather(*(
                picows.ws_connect(Listener, url, websocket_handshake_timeout=60)
                for _ in range(start, min(n, start + 200))
            ))
            transports += [t for t, _l in batch]
        await asyncio.sleep(1.0)  # a refused stream would be closed by now
        opened.put((len(transports), closed[0]))
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        for transport in transports:
            transport.disconnect()
        await asyncio.sleep(0.5)

    asyncio.run(run())


def measure(name: str, url: str, n: int, pid: int) -> None:
    ctx = mp.get_context("spawn")
    opened, stop = ctx.Queue(), ctx.Event()
    server = psutil.Process(pid)
    time.sleep(1.0)
    before = server.memory_info().rss
    started = time.monotonic()
    shares = [n // PROCS + (1 if i < n % PROCS else 0) for i in range(PROCS)]
    workers = [ctx.Process(target=client_main, args=(url, k, opened, stop)) for k in shares]
    for w in workers:
        w.start()
    results = [opened.get(True, 600) for _ in workers]
    seconds = time.monotonic() - started - 1.0  # minus the clients' settling second
    time.sleep(1.0)
    after = server.memory_info().rss
    count = sum(r[0] for r in results)
    refused = sum(r[1] for r in results)
    print(f"  {name:<28} {count:>6} open ({refused} closed by server)  "
          f"{(after - before) / max(count, 1) / 1024:6.1f} KiB/connection  "
          f"opened in {seconds:5.1f} s ({count / max(seconds, 1e-6):,.0f}/s)  "
          f"server RSS {after / 2**20:,.0f} MiB", flush=True)
    stop.set()
    for w in workers:
        w.join(30)


def bare_main(port: int) -> None:
    """The reference: a bare websockets server holding idle connections."""
    from websockets.asyncio.server import serve

    raise_nofile()

    async def handler(conn: Any) -> None:
        await conn.wait_closed()

    async def main() -> None:
        async with serve(handler, "127.0.0.1", port, compression=None):
            await asyncio.Future()

    asyncio.run(main())


def wait_port(port: int) -> None:
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def main(n: int) -> None:
    raise_nofile()
    print(f"{n} idle authenticated connections, one server process:")
    with tempfile.TemporaryDirectory() as tmp:
        for port_kind in ("ws-port", "http-port"):
            db = f"sqlite+aiosqlite:///{Path(tmp) / f'{port_kind}.db'}"
            key = asyncio.run(make_user(db))
            port, ws_port = free_port(), free_port()
            env = {**os.environ, "RIDECAST_DATABASE_URL": db, "RIDECAST_WS_PORT": str(ws_port),
                   "RIDECAST_LOG_LEVEL": "warning",
                   # One user, one token: lift the caps (2,000 per user, 200 per token), or
                   # all but 200 streams are refused and the figure per stream is wrong.
                   "RIDECAST_WS_MAX_STREAMS_PER_USER": "50000",
                   "RIDECAST_WS_MAX_STREAMS_PER_TOKEN": "50000"}
            say_changed_defaults("ridecast runs with", env)
            proc = subprocess.Popen(
                [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port)],
                env=env, cwd=tmp, preexec_fn=raise_nofile)
            try:
                wait_port(port)
                wait_port(ws_port)
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", auth=("bench", key)) as c:
                    sim = c.post("/api/v2/simulation", json={"name": "b", "data": {}}).json()["id"]
                    token = c.get("/api/v2/user/token/").json()["token"]
                target = ws_port if port_kind == "ws-port" else port
                measure(f"ridecast {port_kind}",
                        f"ws://127.0.0.1:{target}/simulation_events/{sim}?token={token}",
                        n, proc.pid)
            finally:
                proc.terminate()
                proc.wait(30)
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "_bare", str(port)],
                            preexec_fn=raise_nofile)
    try:
        wait_port(port)
        measure("bare websockets", f"ws://127.0.0.1:{port}/", n, proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "_bare":
        bare_main(int(sys.argv[2]))
    else:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("-n", type=int, default=10_000, help="connections (default 10000)")
        main(parser.parse_args().n)
