"""The engine process: hosts several engines and computes their steps, away from the API.

``ridecast serve`` starts a few of these (``engine_pool.py``) and talks to each over a
socket pair, one request and one answer at a time per request id, in frames of a 4-byte
length and a pickle (the peer is our own parent; nothing else writes to the socket). The
process does nothing but compute: the owner of the run (its runner, journal, lease and
publishing) stays in the serving process, which sends

* ``create``: build the engine of a run from its spec;
* ``advance``: run its timers up to a simulated time, applying the journal entries that fall
  on the way, and answer its events;
* ``apply``: an operation (a ``Command``) at the engine's current time;
* ``kpis``: the run's KPIs (cached as in-process, ``KpiCache``);
* ``drop``: forget the engine (the run ended or was deleted); the answer carries the
  process's resident memory, so that the pool can recycle a process that has grown.

A step of a run at ``speed: "max"`` carries a CPU budget: the engine advances in sub-steps
and answers as soon as the budget is spent, wherever it stands (the events do not depend on
how time is cut: tests/simulator/test_steps.py). ``slices.py`` decides which request goes
next. Run as ``python -m ridecast.simulator.hosting.engine_process FD NICE``: the process
lowers its own priority by NICE, so that on a busy machine the serving processes (requests,
streams, publishing) get the CPU before the engines.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import socket
import struct
import sys
import time
from typing import Any

from ...errors import RidecastError
from ..core import snapshot as codec
from ..core.commands import Command, apply
from ..core.engine import Engine
from ..core.kpis import KpiCache
from ..core.spec import RunSpec
from .slices import Request, SliceQueue

HEADER = struct.Struct("!I")
"""Length prefix of a frame (a pickle follows)."""

FIRST_SUB_STEP_S = 1.0
"""Simulated seconds of a budgeted step's first sub-step; it grows while sub-steps are cheap."""
MAX_SUB_STEP_S = 3600.0


def rss_bytes() -> int:
    """This process's resident set size (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def write_frame(sock: socket.socket, body: Any) -> None:
    data = pickle.dumps(body, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(HEADER.pack(len(data)) + data)


class Hosted:
    """One engine of this process, with its KPI cache and its sub-step size."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.kpis = KpiCache()
        self.sub_step_s = FIRST_SUB_STEP_S

    def state(self) -> dict[str, Any]:
        engine = self.engine
        return {"now": engine.now, "next_t": engine.next_t, "finished": engine.finished}

    def advance(self, until: float, entries: list[tuple[int, float, str, dict[str, Any]]],
                budget_s: float | None) -> dict[str, Any]:
        """Events up to ``until`` (or as far as ``budget_s`` of CPU time went), the journal
        ``entries`` due on the way applied; ``applied``: how many were."""
        engine = self.engine
        events: list[dict[str, Any]] = []
        applied = 0
        cpu0 = time.process_time()
        for seq, sim_t, name, args in entries:
            if sim_t > until:
                break
            events += self._advance(sim_t, cpu0, budget_s)
            if engine.now < sim_t and not engine.finished:
                return {"events": events, "applied": applied, **self.state()}
            try:
                _, caused = apply(engine, Command(name, args))
            except RidecastError as exc:
                return {"events": events, "applied": applied, "diverged": seq,
                        "message": f"journal entry {seq} ({name}) was refused on replay: "
                                   f"{exc}", **self.state()}
            applied += 1
            events += caused
        events += self._advance(until, cpu0, budget_s)
        return {"events": events, "applied": applied, **self.state()}

    def _advance(self, until: float, cpu0: float, budget_s: float | None) -> list[Any]:
        engine = self.engine
        if budget_s is None:
            return engine.advance(until)
        events: list[Any] = []
        # At least one sub-step, so that every step makes progress (and timers due at
        # ``until`` itself run, as in one ``advance(until)``).
        while True:
            before = time.process_time()
            events += engine.advance(min(until, engine.now + self.sub_step_s))
            done = time.process_time()
            took = done - before
            # Sub-steps of a few hundredths of the budget: small enough not to overrun it
            # much, large enough that the loop costs nothing.
            if took < budget_s / 40:
                self.sub_step_s = min(MAX_SUB_STEP_S, self.sub_step_s * 2)
            elif took > budget_s / 10 and self.sub_step_s > 0.01:
                self.sub_step_s /= 2
            if engine.now >= until or engine.finished or done - cpu0 >= budget_s:
                break
        return events


class EngineProcess:
    """The request loop of one engine process (see the module docstring)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.engines: dict[int, Hosted] = {}
        self.queue = SliceQueue()
        self._buffer = bytearray()

    def _read_available(self, block: bool) -> bool:
        """Move whole frames from the socket to the queue; False when the parent is gone."""
        readable, _, _ = select.select([self.sock], [], [], None if block else 0)
        if not readable:
            return True
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            return False
        buffer = self._buffer
        buffer += chunk
        while len(buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(buffer)
            if len(buffer) < HEADER.size + size:
                break
            request = pickle.loads(bytes(buffer[HEADER.size:HEADER.size + size]))
            del buffer[:HEADER.size + size]
            self.queue.push(request)
        return True

    def serve(self) -> None:
        while True:
            # Read what has arrived (without waiting while work is queued), then serve one.
            if not self._read_available(block=not self.queue):
                return
            if not self.queue:
                continue
            request = self.queue.pop()
            if request.op == "exit":
                return
            cpu0 = time.process_time()
            try:
                answer: dict[str, Any] = self.handle(request)
            except RidecastError as exc:
                answer = {"error": exc}
            except Exception as exc:  # a bug: reported to the run, not fatal to the others
                answer = {"error": RuntimeError(f"{type(exc).__name__}: {exc}")}
            # What computing it cost, for the run's ``engine_cpu_s`` (its encoding, charged
            # to the turns below, is the process's own).
            answer["cpu_s"] = time.process_time() - cpu0
            write_frame(self.sock, (request.req_id, answer))
            # Its answer's encoding included (it grows with the events); charged before the
            # queue is read again, so the run's next step finds its group's place.
            self.queue.served(request, time.process_time() - cpu0)

    def handle(self, request: Request) -> dict[str, Any]:
        args = request.args
        if request.op == "create":
            spec = RunSpec.from_json(args["spec"])
            # A run taken over starts from its newest snapshot, decoded here.
            snapshot = args.get("snapshot")
            hosted = Hosted(codec.loads(snapshot, spec.settings) if snapshot is not None
                            else spec.engine(args["simulation_id"]))
            self.engines[request.key] = hosted
            return {"pid": os.getpid(), **hosted.state()}
        if request.op == "drop":
            if self.engines.pop(request.key, None) is not None:
                gc.collect()
            return {"rss": rss_bytes(), "engines": len(self.engines)}
        if request.op == "stats":
            return {"rss": rss_bytes(), "engines": len(self.engines), "pid": os.getpid()}
        hosted = self.engines[request.key]
        if request.op == "advance":
            return hosted.advance(args["until"], args["entries"], args["budget_s"])
        if request.op == "apply":
            body, events = apply(hosted.engine, Command(args["name"], args["args"]))
            return {"body": body, "events": events, **hosted.state()}
        if request.op == "snapshot":
            return {"body": codec.dumps(hosted.engine)}
        if request.op == "kpis":
            kpis = hosted.kpis.get(hosted.engine, args["operations"],
                                   running=args["running"], throttle=args["throttle"],
                                   settled=args["settled"])
            return {"kpis": kpis}
        raise ValueError(f"unknown engine request {request.op!r}")


def main(argv: list[str]) -> None:
    if len(argv) > 2 and int(argv[2]) > 0:
        with contextlib.suppress(OSError):
            os.nice(int(argv[2]))
    sock = socket.socket(fileno=int(argv[1]))
    sock.setblocking(True)
    # The parent went away or stopped us: nothing here needs saving.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        EngineProcess(sock).serve()


if __name__ == "__main__":
    main(sys.argv)
