"""The engine processes of one ``ridecast serve`` process.

``EnginePool`` starts up to ``size`` engine processes (``engine_process.py``; by default
one per CPU but one: ``default_size``) when runs need them, gives each new run to the least
loaded one (runs at ``speed: "max"`` count most, and an organisation's runs are spread over
the processes), and supervises them: a process that exits fails the requests it had with
``EngineLost`` (their runners give the runs up, to be taken over from their snapshots), and
the next run starts a fresh process. A process left with no engine whose memory grew by
more than ``recycle_bytes`` since it started is ended at once, so memory a big run took
goes back to the system (a Python process seldom returns freed memory itself); one left
empty for ``idle_s`` is ended too: a server with no run has no engine process. Engine
processes run at a lower priority (``nice``) than the serving process.

``RemoteEngine`` is the ``EngineHandle`` of one run in such a process: each call is one
request and one answer over the process's socket; the serving event loop only waits. Each
answer says the CPU time its request took, summed in the handle's ``cpu_s`` (the run's
``engine_cpu_s``), so the share each run got can be seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import pickle
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ...metrics import (
    SIMULATOR_ENGINE_PROCESSES,
    SIMULATOR_ENGINES,
    SIMULATOR_ENGINES_LOST,
)
from ..core.commands import Command
from ..core.engine import Engine
from ..core.operations import Result
from ..core.spec import RunSpec
from .cpus import usable_cpus
from .engine_handle import EngineLost, HandleState, JournalDiverged, Step
from .engine_process import HEADER
from .journal import JournalEntry
from .slices import Request

log = logging.getLogger(__name__)


def default_size(cpus: int | None = None) -> int:
    """Engine processes by default: one per usable CPU but one (its CPU set, cut to its
    cgroup's CPU quota: ``cpus``), and at least one.

    The CPU left over is the serving process's: its event loop, its store threads and the
    publishing of the runs' events. Engine processes at 'max' never rest, so with one per
    CPU every request and stream waits for a CPU an engine holds, however low the engines'
    priority (docs/performance.md, "Simulator isolation").

    >>> [default_size(n) for n in (1, 2, 4, 16)]
    [1, 1, 3, 15]
    """
    return max(1, (usable_cpus() if cpus is None else cpus) - 1)


class EngineProcessClient:
    """The serving side of one engine process: requests out, answers matched by id."""

    def __init__(self, proc: asyncio.subprocess.Process, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.engines: dict[int, bool] = {}  # key -> runs at 'max'
        self.groups: dict[str, int] = {}
        self.base_rss = 0
        self.lost: str | None = None
        self.retire: asyncio.TimerHandle | None = None  # ends the process when left empty
        self._read_task = asyncio.create_task(self._read(), name=f"engine-process-{self.pid}")

    @classmethod
    async def spawn(cls, nice: int = 0) -> EngineProcessClient:
        ours, theirs = socket.socketpair()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ridecast.simulator.hosting.engine_process",
                str(theirs.fileno()), str(nice), pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL)
        finally:
            theirs.close()
        reader, writer = await asyncio.open_connection(sock=ours, limit=1 << 24)
        client = cls(proc, reader, writer)
        SIMULATOR_ENGINE_PROCESSES.inc()
        stats = await client.request(0, "stats", {})
        client.base_rss = int(stats["rss"])
        log.info("engine process %s started", client.pid)
        return client

    @property
    def alive(self) -> bool:
        return self.lost is None

    def load(self, group: str) -> tuple[int, int, int]:
        """Lower is better: runs at 'max', then the group's runs, then all runs."""
        return (sum(self.engines.values()), self.groups.get(group, 0), len(self.engines))

    async def _read(self) -> None:
        try:
            while True:
                header = await self._reader.readexactly(HEADER.size)
                (size,) = HEADER.unpack(header)
                req_id, answer = pickle.loads(await self._reader.readexactly(size))
                future = self._pending.pop(req_id, None)
                if future is not None and not future.done():
                    future.set_result(answer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            # The owner's loop is ending: a process left running would hold the wait below
            # (and so the owner's exit) for ever.
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            raise
        finally:
            code = await self.proc.wait()
            self._fail(f"the engine process {self.pid} exited (code {code})")

    def _fail(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
            SIMULATOR_ENGINE_PROCESSES.dec()
            SIMULATOR_ENGINES.dec(len(self.engines))
            if self.engines:
                SIMULATOR_ENGINES_LOST.inc()
                log.error("%s; its %d run(s) stop", why, len(self.engines))
        for future in self._pending.values():
            if not future.done():
                future.set_exception(EngineLost(why))
        self._pending.clear()

    async def request(self, key: int, op: str, args: dict[str, Any], *, urgent: bool = True,
                      group: str = "") -> dict[str, Any]:
        """Send one request and await its answer; ``EngineLost`` once the process is gone."""
        if self.lost is not None:
            raise EngineLost(self.lost)
        req_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = future
        body = pickle.dumps(Request(req_id, op, key, args, urgent, group),
                            protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._writer.write(HEADER.pack(len(body)) + body)
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self._pending.pop(req_id, None)
            raise EngineLost(self.lost or f"the engine process {self.pid} is gone") from exc
        answer = await future
        error = answer.get("error")
        if isinstance(error, BaseException):
            raise error
        return answer

    async def close(self) -> None:
        """End the process (it holds nothing that needs saving: the owner has it all)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._read_task


class EnginePool:
    """Engine processes on demand, up to ``size`` (see the module docstring)."""

    def __init__(self, size: int, *, slice_s: float, recycle_bytes: int,
                 idle_s: float = 10.0, nice: int = 0) -> None:
        self.size = max(1, size)
        self.slice_s = slice_s
        self.recycle_bytes = recycle_bytes
        self.idle_s = idle_s
        self.nice = nice
        self._tasks: set[asyncio.Task[None]] = set()
        self.processes: list[EngineProcessClient] = []
        self._keys = itertools.count(1)
        self._spawning = asyncio.Lock()
        self._closed = False

    async def _pick(self, group: str) -> EngineProcessClient:
        async with self._spawning:
            if self._closed:
                # A run given a process while the node shuts down: a process started now
                # would be nobody's to end.
                raise EngineLost("this node's engine processes are shutting down")
            self.processes = [p for p in self.processes if p.alive]
            idle = [p for p in self.processes if not p.engines]
            if idle:
                chosen = idle[0]
            elif len(self.processes) < self.size:
                chosen = await EngineProcessClient.spawn(self.nice)
                self.processes.append(chosen)
            else:
                chosen = min(self.processes, key=lambda p: p.load(group))
            if chosen.retire is not None:
                chosen.retire.cancel()
                chosen.retire = None
            return chosen

    async def open(self, simulation_id: int, spec: RunSpec, *,
                   group: str = "", snapshot: bytes | None = None) -> RemoteEngine:
        """A fresh engine for ``spec`` in one of the processes (or one restored from
        ``snapshot``, a run's snapshot: ``core/snapshot.py``)."""
        settings = spec.settings
        fast = settings.realtime_factor is None
        client = await self._pick(group or f"simulation-{simulation_id}")
        key = next(self._keys)
        client.engines[key] = fast
        SIMULATOR_ENGINES.inc()
        client.groups[group] = client.groups.get(group, 0) + 1
        handle = RemoteEngine(self, client, key, simulation_id, spec, group=group,
                              urgent=not fast)
        try:
            answer = await client.request(key, "create", {
                "simulation_id": simulation_id, "spec": spec.to_json(),
                "snapshot": snapshot})
        except BaseException:
            await handle.close()
            raise
        handle._update(answer)
        handle.pid = int(answer["pid"])
        return handle

    async def release(self, client: EngineProcessClient, key: int, group: str) -> None:
        """Forget engine ``key``; recycle its process when it is empty and has grown."""
        if key not in client.engines:
            return
        del client.engines[key]
        if client.alive:
            SIMULATOR_ENGINES.dec()
        client.groups[group] -= 1
        if not client.groups[group]:
            del client.groups[group]
        if not client.alive:
            return
        try:
            answer = await client.request(key, "drop", {})
        except EngineLost:
            return
        if client.engines:
            return
        if int(answer["rss"]) - client.base_rss > self.recycle_bytes:
            log.info("engine process %s recycled (resident memory %d MiB, %d MiB at start)",
                     client.pid, int(answer["rss"]) >> 20, client.base_rss >> 20)
            await self._end(client)
        elif client.retire is None:
            client.retire = asyncio.get_running_loop().call_later(
                self.idle_s, self._end_soon, client)

    def _end_soon(self, client: EngineProcessClient) -> None:
        client.retire = None
        if not client.engines:
            task = asyncio.create_task(self._end(client))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _end(self, client: EngineProcessClient) -> None:
        async with self._spawning:  # not while a run is being given to it
            if client.engines:
                return
            with contextlib.suppress(ValueError):
                self.processes.remove(client)
        await client.close()

    async def stats(self) -> list[dict[str, Any]]:
        """Per live process: its pid, resident bytes and engines (for tests and /metrics)."""
        out = []
        for client in list(self.processes):
            with contextlib.suppress(EngineLost):
                out.append(await client.request(0, "stats", {}))
        return out

    async def close(self) -> None:
        # Under the lock: a process being started when the node shuts down is in
        # ``processes`` by then, and none is started after.
        async with self._spawning:
            self._closed = True
            processes, self.processes = self.processes, []
        for client in processes:
            if client.retire is not None:
                client.retire.cancel()
            await client.close()
        for task in list(self._tasks):
            await task


class RemoteEngine(HandleState):
    """One run's engine in an engine process (see the module docstring)."""

    def __init__(self, pool: EnginePool, client: EngineProcessClient, key: int,
                 simulation_id: int, spec: RunSpec, *, group: str, urgent: bool) -> None:
        super().__init__(simulation_id, spec.settings, spec.start.timestamp())
        self.pid = client.pid
        self._pool = pool
        self._client = client
        self._key = key
        self._group = group
        self._urgent = urgent
        self._open = True

    async def _request(self, op: str, args: dict[str, Any], *,
                       urgent: bool = True) -> dict[str, Any]:
        if not self._open:
            raise EngineLost("the engine of this run has been freed")
        answer = await self._client.request(self._key, op, args, urgent=urgent,
                                            group=self._group)
        self.cpu_s += float(answer.get("cpu_s", 0.0))
        return answer

    async def advance(self, until: float, entries: Sequence[JournalEntry] = (), *,
                      budget_s: float | None = None) -> Step:
        wire = [(e.seq, e.sim_t, e.command.name, e.command.args) for e in entries
                if e.sim_t <= until]
        # A run at 'max' steps in slices of CPU time, served in turns; a real-time run's
        # step (and an operation's catch-up, ``budget_s`` None) goes first.
        answer = await self._request("advance", {
            "until": until, "entries": wire, "budget_s": budget_s,
        }, urgent=self._urgent or budget_s is None)
        self._update(answer)
        if "diverged" in answer:
            raise JournalDiverged(str(answer["message"]))
        return Step(answer["events"], int(answer["applied"]))

    async def apply(self, op: Callable[[Engine], Result] | None,
                    command: Command | None) -> Result:
        if command is None:
            raise TypeError("an engine in another process takes operations as Commands")
        answer = await self._request("apply", {"name": command.name, "args": command.args})
        self._update(answer)
        return answer["body"], answer["events"]

    async def snapshot(self) -> bytes:
        answer = await self._request("snapshot", {})
        body: bytes = answer["body"]
        return body

    async def kpis(self, operations: int, *, running: bool, throttle: bool,
                   settled: bool) -> dict[str, Any]:
        answer = await self._request("kpis", {"operations": operations, "running": running,
                                              "throttle": throttle, "settled": settled})
        kpis: dict[str, Any] = answer["kpis"]
        return kpis

    async def close(self) -> None:
        if self._open:
            self._open = False
            await self._pool.release(self._client, self._key, self._group)
