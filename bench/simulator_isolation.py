"""Another organisation's latency beside big simulator runs, through ``ridecast serve``.

    python bench/simulator_isolation.py                     # 3,000-vehicle runs at 'max'
    python bench/simulator_isolation.py --base-src /tmp/before/src   # beside another tree
    python bench/simulator_isolation.py --quick             # smoke run
    python bench/simulator_isolation.py --base-src SRC --base-env \
        RIDECAST_SIMULATOR_ENGINE_PROCESSES=2               # old settings as 'base'

One ``ridecast serve`` on SQLite (in a temporary directory) per source tree. An observer of
its own organisation holds a simulation that runs nothing and measures, one request at a
time each, for ``--seconds`` per phase:

* ``GET /api/v2/simulation/{id}`` of its simulation, and ``/healthz``, every 50 ms;
* its websocket stream: an event POSTed every 100 ms to its simulation, the latency from
  just before the POST to the frame's receipt;
* a run of its own at ``speed: 1`` (50 vehicles): how far its simulated clock is behind the
  wall clock at the end of each phase.

Phases: idle; beside one run at ``speed: "max"`` of another organisation (``--vehicles``,
``--bookings-per-hour``, a day long); beside ``--runs`` such runs, one per organisation.
Printed per phase: p50 and p99 of each, their ratio to idle (target: p99 at most 2x idle,
``/healthz`` p99 under 50 ms), and each run's simulated seconds per wall second (fairness:
the runs' rates side by side; a run that costs more per simulated second is slower on the
same CPU), each run's engine CPU per wall second (``engine_cpu_s`` of its status: the share
that fair turns give out), and the CPU each engine process used per wall second (runs
share their process's CPU, so with several processes the runs' rates are only as even as
the processes' counts of runs). Then the memory: the resident set of the server and every
process it started, before the runs, at their peak, and after stop and DELETE of every run
(target: back within 20% of before).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import psutil
import websockets
from _load import free_port, percentile, spawn, wait_http

CENTRE = {"lat": 52.52, "lon": 13.405, "radius_m": 8000}


def make_users_child(url: str, n: int) -> None:
    """Migrate the store and print ``n`` users' ``name key``, each of its own organisation
    (run as a child under the contender's source tree)."""
    from ridecast.store.accounts import AccountStore
    from ridecast.store.engine import create_engine, upgrade

    async def run() -> None:
        await upgrade(url)
        engine = create_engine(url)
        try:
            for i in range(n):
                _principal, key = await AccountStore(engine).create_user(
                    f"bench{i}", f"bench-org-{i}")
                print(f"bench{i} {key}")
        finally:
            await engine.dispose()

    asyncio.run(run())


def tree_rss(pid: int) -> int:
    """Resident bytes of process ``pid`` and every process it started."""
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended meanwhile
            total += proc.memory_info().rss
    return total


class Probe:
    """The observer's three measurements (see the module docstring)."""

    def __init__(self, base: str, ws_base: str, auth: tuple[str, str], sim: int,
                 token: str) -> None:
        self.base = base
        self.ws_url = f"{ws_base}/simulation_events/{sim}?token={token}"
        self.auth = auth
        self.sim = sim

    async def _http(self, client: httpx.AsyncClient, path: str, until: float,
                    out: list[float]) -> None:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                response = await client.get(path)
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            took = (time.perf_counter() - started) * 1000
            out.append(took if ok else 30_000.0)
            await asyncio.sleep(max(0.0, 0.05 - took / 1000))

    async def _stream(self, client: httpx.AsyncClient, until: float,
                      out: list[float]) -> None:
        sent: dict[int, float] = {}
        received = asyncio.Event()
        async with websockets.connect(self.ws_url, max_size=None, open_timeout=30,
                                      close_timeout=5) as ws:

            async def receive() -> None:
                with contextlib.suppress(websockets.ConnectionClosed):
                    await read()

            async def read() -> None:
                async for frame in ws:
                    event = json.loads(frame)
                    seq = event.get("data", {}).get("booking_ids", [None])[0]
                    if seq in sent:
                        out.append((time.perf_counter() - sent.pop(seq)) * 1000)
                        if not sent:
                            received.set()

            reader = asyncio.create_task(receive())
            seq = 0
            while time.monotonic() < until:
                seq += 1
                sent[seq] = time.perf_counter()
                # A server whose loop is held may not answer: counted as never received.
                with contextlib.suppress(httpx.HTTPError):
                    await client.post(f"/api/v2/simulation/{self.sim}/events", json={
                        "simulation_id": self.sim, "agent_type": "event_publisher",
                        "message_type": "bookings_cancellation",
                        "data": {"booking_ids": [seq]},
                        "current_sim_ts": "2024-05-01T10:00:00+00:00",
                        "transmit_to_websocket": True})
                await asyncio.sleep(0.1)
            if sent:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(received.wait(), 30)
            reader.cancel()
            out.extend(30_000.0 for _ in sent)  # never received: counted as 30 s

    async def measure(self, seconds: float) -> dict[str, list[float]]:
        until = time.monotonic() + seconds
        out: dict[str, list[float]] = {"GET simulation": [], "/healthz": [], "websocket": []}
        async with httpx.AsyncClient(base_url=self.base, auth=self.auth,
                                     timeout=30) as client:
            await asyncio.gather(
                self._http(client, f"/api/v2/simulation/{self.sim}", until,
                           out["GET simulation"]),
                self._http(client, "/healthz", until, out["/healthz"]),
                self._stream(client, until, out["websocket"]))
        return out


def sim_seconds(http: httpx.Client, sim: int) -> float:
    return progress(http, sim)[0]


def progress(http: httpx.Client, sim: int) -> tuple[float, float]:
    """Simulated seconds the run has reached, and CPU seconds its engine computed (NaN
    from a tree whose status does not say)."""
    try:
        status = http.get(f"/api/v2/simulation/{sim}/simulator", timeout=30).json()
    except httpx.TimeoutException:
        return float("nan"), float("nan")
    cpu = status.get("engine_cpu_s")
    cpu_s = float("nan") if cpu is None else float(cpu)
    if not status.get("sim_ts") or not status.get("started_sim_ts"):
        return 0.0, cpu_s
    return (datetime.fromisoformat(status["sim_ts"])
            - datetime.fromisoformat(status["started_sim_ts"])).total_seconds(), cpu_s


def engine_cpu(pid: int) -> dict[int, float]:
    """CPU seconds so far of each engine process under server ``pid``."""
    out = {}
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended meanwhile
            if "engine_process" in " ".join(child.cmdline()):
                out[child.pid] = sum(child.cpu_times()[:2])
    return out


def contender(name: str, src: str, tmp: Path, args: argparse.Namespace,
              settings: list[str]) -> None:
    url = f"sqlite+aiosqlite:///{tmp / f'{name}.db'}"
    env = {**os.environ, "RIDECAST_DATABASE_URL": url, "RIDECAST_LOG_LEVEL": "warning",
           **dict(setting.split("=", 1) for setting in settings)}
    if src:
        env["PYTHONPATH"] = src
    users = subprocess.run([sys.executable, __file__, "--make-users", url,
                            str(args.runs + 1)], env=env, check=True, capture_output=True,
                           text=True).stdout.split("\n")
    auths = [tuple(line.split()) for line in users if line.strip()]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = spawn(["-m", "ridecast.cli.main", "serve", "--port", str(port)], env=env,
                   cwd=str(tmp))
    clients = [httpx.Client(base_url=base, auth=auth, timeout=30) for auth in auths]
    try:
        wait_http(port, "/healthz")
        observer = clients[0]
        obs_sim = int(observer.post("/api/v2/simulation", json={
            "name": "observer", "data": {}}).json()["id"])
        token = observer.get("/api/v2/user/token/").json()["token"]
        probe = Probe(base, f"ws://127.0.0.1:{port}", auths[0], obs_sim,  # type: ignore[arg-type]
                      token)
        asyncio.run(probe.measure(min(1.0, args.seconds)))  # warm-up
        rss_before = tree_rss(server.pid)  # before any run (the observer's too)
        # The observer's own run at real time, through every phase: its lag behind the
        # wall clock shows whether a 'speed: 1' run keeps up beside runs at 'max'.
        realtime = int(observer.post("/api/v2/simulation", json={"name": "realtime", "data": {
            "simulator": {"seed": 99, "vehicles": 50, "speed": 1, "bookings_per_hour": 600,
                          "duration_s": 86400, "area": CENTRE}}}).json()["id"])
        started_rt = observer.post(f"/api/v2/simulation/{realtime}/simulator/start")
        assert started_rt.status_code == 200, started_rt.text
        rt_wall0 = time.monotonic()
        sims = []
        for i, http in enumerate(clients[1:]):
            sims.append(int(http.post("/api/v2/simulation", json={"name": f"run{i}", "data": {
                "simulator": {"seed": i + 1, "vehicles": args.vehicles, "speed": "max",
                              "bookings_per_hour": args.bookings_per_hour,
                              "duration_s": 86400, "area": CENTRE}}}).json()["id"]))
        rss_peak = rss_before
        results: dict[str, dict[str, list[float]]] = {}
        rates: dict[str, list[float]] = {}
        cpus: dict[str, list[float]] = {}
        lags: dict[str, float] = {}
        engines: dict[str, list[float]] = {}
        started: list[int] = []
        for phase, running in (("idle", 0), ("one run", 1), (f"{args.runs} runs", args.runs)):
            for i in range(len(started), running):
                try:
                    response = clients[1 + i].post(
                        f"/api/v2/simulation/{sims[i]}/simulator/start")
                    ok = response.status_code == 200
                except httpx.TimeoutException:
                    ok = False
                if not ok:  # a server whose loop a run holds: say so, measure what it does
                    print(f"  {name}: {phase}: starting run {i + 1} failed or timed out")
                started.append(sims[i])
            time.sleep(args.warmup)
            at0 = [progress(clients[1 + i], sims[i]) for i in range(running)]
            cpu0 = engine_cpu(server.pid)
            wall0 = time.monotonic()
            results[phase] = asyncio.run(probe.measure(args.seconds))
            wall = time.monotonic() - wall0
            cpu1 = engine_cpu(server.pid)
            engines[phase] = sorted((cpu1[pid] - cpu0.get(pid, 0.0)) / wall
                                    for pid in cpu1)
            at1 = [progress(clients[1 + i], sims[i]) for i in range(running)]
            rates[phase] = [(b[0] - a[0]) / wall for a, b in zip(at0, at1, strict=True)]
            cpus[phase] = [(b[1] - a[1]) / wall for a, b in zip(at0, at1, strict=True)]
            lags[phase] = (time.monotonic() - rt_wall0) - sim_seconds(observer, realtime)
            rss_peak = max(rss_peak, tree_rss(server.pid))
        observer.post(f"/api/v2/simulation/{realtime}/simulator/stop")
        observer.delete(f"/api/v2/simulation/{realtime}")
        for i, sim in enumerate(sims):
            try:
                for response in (
                        clients[1 + i].post(f"/api/v2/simulation/{sim}/simulator/stop"),
                        clients[1 + i].delete(f"/api/v2/simulation/{sim}")):
                    if response.status_code >= 300:
                        print(f"  ({response.request.method} {response.request.url.path}: "
                              f"{response.status_code} {response.text[:200]})")
            except httpx.TimeoutException:
                print(f"  {name}: stopping or deleting run {i + 1} timed out")
        # Memory goes back when engines are freed and their processes recycled: wait for it
        # (up to --settle seconds), then read it.
        deadline = time.monotonic() + args.settle
        while (time.monotonic() < deadline
               and tree_rss(server.pid) > 1.2 * rss_before):
            time.sleep(0.5)
        rss_after = tree_rss(server.pid)
        own_after = psutil.Process(server.pid).memory_info().rss
        children_after = len(psutil.Process(server.pid).children(recursive=True))
    finally:
        for http in clients:
            http.close()
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            print(f"  {name}: the server did not stop within 60 s; killed")
            for child in psutil.Process(server.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            server.kill()
            server.wait()
    idle = results["idle"]
    print(f"{name}: latency of another organisation (ms), one request at a time:")
    for phase, r in results.items():
        cells = []
        for probe_name, samples in r.items():
            p50, p99 = percentile(samples, 50), percentile(samples, 99)
            ratio = p99 / max(1e-9, percentile(idle[probe_name], 99))
            cells.append(f"{probe_name} p50 {p50:7.1f} p99 {p99:8.1f} (x{ratio:5.1f})")
        print(f"  {phase:8s} " + "; ".join(cells))
        print(f"  {'':8s} the observer's run at speed 1: {lags[phase]:5.2f} s behind the "
              "wall clock (target: under 1 s)")
        if rates.get(phase):
            shown = ", ".join(f"{rate:7.1f}" for rate in rates[phase])
            spread = min(rates[phase]) / max(1e-9, max(rates[phase]))
            print(f"  {'':8s} simulated s per wall s, per run: {shown}  (slowest / fastest "
                  f"{spread:.2f})")
        if cpus.get(phase) and all(cpu == cpu for cpu in cpus[phase]):  # no NaN
            shown = ", ".join(f"{cpu:.3f}" for cpu in cpus[phase])
            spread = min(cpus[phase]) / max(1e-9, max(cpus[phase]))
            print(f"  {'':8s} engine CPU s per wall s, per run: {shown}  (least / most "
                  f"{spread:.2f})")
        print(f"  {'':8s} CPU s per wall s of each engine process: "
              + (", ".join(f"{cpu:.2f}" for cpu in engines[phase]) or "none"))
    print(f"  {name}: resident memory of the server and its processes: before "
          f"{rss_before / 2**20:.0f} MiB, peak {rss_peak / 2**20:.0f} MiB, after stop and "
          f"DELETE {rss_after / 2**20:.0f} MiB ({rss_after / rss_before:.2f} x before; the "
          f"server itself {own_after / 2**20:.0f} MiB, {children_after} processes beside)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vehicles", type=int, default=3000)
    parser.add_argument("--bookings-per-hour", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=20.0, help="per phase")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds between starting a phase's runs and measuring")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="longest wait for memory to come back after the runs")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: tiny runs, short phases")
    parser.add_argument("--base-src", default="",
                        help="a ridecast source tree (its src/ directory) to measure as "
                             "'base', beside this one in the same run")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for this tree's server (repeatable)")
    parser.add_argument("--base-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for the base's server (repeatable); with "
                             "--base-src . the same code under other settings")
    parser.add_argument("--make-users", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_users:
        make_users_child(args.make_users[0], int(args.make_users[1]))
        return
    if args.quick:
        args.vehicles, args.bookings_per_hour, args.runs = 20, 600, 2
        args.seconds, args.warmup, args.settle = 1.0, 0.5, 15.0
    with tempfile.TemporaryDirectory() as tmp:
        contender("ridecast", "", Path(tmp), args, args.env)
        if args.base_src:
            contender("base", args.base_src, Path(tmp), args, args.base_env)
    print("simulator isolation: done")


if __name__ == "__main__":
    main()
