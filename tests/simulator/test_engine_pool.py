"""The engine pool's processes, started for real: their priority, their count by default,
where new runs go, and one engine for two starts of a run at once."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psutil

from ridecast.errors import Conflict
from ridecast.simulator.core.spec import RunSpec
from ridecast.simulator.hosting.engine_handle import LocalEngine
from ridecast.simulator.hosting.engine_pool import EnginePool, RemoteEngine, default_size
from ridecast.simulator.hosting.manager import SimulatorManager


def spec(seed: int, speed: float | str = "max") -> RunSpec:
    """A small run; the pool only hosts it (nothing here advances it)."""
    data: dict[str, Any] = {"simulator": {
        "seed": seed, "vehicles": 4, "bookings_per_hour": 60, "duration_s": 600,
        "speed": speed, "network": "straight", "start_ts": "2024-01-01T08:00:00+00:00"}}
    return RunSpec.new(data)


def pool(size: int, nice: int = 0) -> EnginePool:
    return EnginePool(size, slice_s=0.02, recycle_bytes=1 << 30, idle_s=60.0, nice=nice)


def test_default_leaves_one_cpu_to_the_serving_process() -> None:
    assert [default_size(n) for n in (1, 2, 3, 8)] == [1, 1, 2, 7]
    assert default_size() >= 1


async def test_engine_processes_run_at_a_lower_priority() -> None:
    """The child lowers its own priority by ``nice`` (from this process's, at most 19);
    this process keeps its own."""
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    engines = pool(1, nice=7)
    try:
        handle = await engines.open(1, spec(1), group="a")
        assert handle.pid != os.getpid()
        assert os.getpriority(os.PRIO_PROCESS, handle.pid) == min(19, ours + 7)
        assert psutil.Process(handle.pid).nice() == min(19, ours + 7)
        assert os.getpriority(os.PRIO_PROCESS, 0) == ours
    finally:
        await engines.close()


async def test_nice_zero_keeps_the_serving_priority() -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    engines = pool(1, nice=0)
    try:
        handle = await engines.open(1, spec(1), group="a")
        assert os.getpriority(os.PRIO_PROCESS, handle.pid) == ours
    finally:
        await engines.close()


async def test_runs_at_max_spread_evenly_over_the_processes() -> None:
    """Four runs at 'max' of four organisations on two processes: two each, whatever the
    order; a real-time run counts less than one at 'max', so the first run at 'max' does
    not join it while another process can be started."""
    engines = pool(2)
    handles: list[RemoteEngine] = []
    try:
        realtime = await engines.open(1, spec(1, speed=1), group="observer")
        for i in range(4):
            handles.append(await engines.open(10 + i, spec(10 + i), group=f"org-{i}"))
        pids = [handle.pid for handle in handles]
        assert len(set(pids)) == 2, pids
        assert sorted(pids.count(pid) for pid in set(pids)) == [2, 2], pids
        assert pids[0] != realtime.pid  # started beside it, not with it
        # A run that ends frees its place: the next run goes where it was.
        await handles[3].close()
        freed = handles[3].pid
        handles[3] = await engines.open(20, spec(20), group="org-new")
        assert handles[3].pid == freed
    finally:
        for handle in handles:
            await handle.close()
        await engines.close()


async def test_an_organisations_runs_go_to_different_processes() -> None:
    """Between processes as busy as each other, a run goes where its organisation has the
    fewest runs: one process's fair turns would give two runs of one organisation the share
    of one, while the other process serves its runs a share each."""
    engines = pool(2)
    handles: dict[str, RemoteEngine] = {}
    try:
        for i, (name, group) in enumerate([("b", "b"), ("c", "c"), ("a1", "a"), ("d", "d")]):
            handles[name] = await engines.open(i + 1, spec(i + 1), group=group)
        assert handles["b"].pid != handles["c"].pid
        # Two runs at 'max' on each process now; one of them is the organisation's.
        counts = {pid: sum(h.pid == pid for h in handles.values())
                  for pid in (handles["b"].pid, handles["c"].pid)}
        assert sorted(counts.values()) == [2, 2], counts
        handles["a2"] = await engines.open(9, spec(9), group="a")
        assert handles["a2"].pid != handles["a1"].pid
    finally:
        for handle in handles.values():
            await handle.close()
        await engines.close()


async def test_handles_count_the_cpu_their_engine_computed() -> None:
    """``cpu_s`` (a run's ``engine_cpu_s``) grows with the steps computed, in an engine
    process and in this one alike."""
    engines = pool(1)
    try:
        remote = await engines.open(1, spec(1), group="a")
        assert remote.cpu_s >= 0.0
        before = remote.cpu_s
        await remote.advance(600.0)
        assert remote.now == 600.0
        assert remote.cpu_s > before
    finally:
        await engines.close()
    local = LocalEngine(spec(1).engine(1))
    await local.advance(600.0)
    assert local.cpu_s > 0.0


async def test_two_starts_of_one_run_at_once_build_one_engine() -> None:
    """A start sent while another start of the same run builds its engine (in a process of
    the pool: the build awaits) is refused with 409, not run beside it: the first runner,
    replaced unseen, would go on publishing."""
    engines = pool(1)
    manager = SimulatorManager(_discard, pool=engines)
    data = {"simulator": {"seed": 1, "vehicles": 4, "speed": 1, "duration_s": 600,
                          "network": "straight"}}
    try:
        answers = await asyncio.gather(manager.start(7, data), manager.start(7, data),
                                       return_exceptions=True)
        refused = [a for a in answers if isinstance(a, BaseException)]
        assert len(refused) == 1 and isinstance(refused[0], Conflict), answers
        assert refused[0].code == "invalid_state" and "already starting" in refused[0].message
        started = [a for a in answers if not isinstance(a, BaseException)]
        assert started[0]["status"] == "running"
        assert sum(len(p.engines) for p in engines.processes) == 1
        await manager.start(8, data)  # another run is not held up by it
        assert sum(len(p.engines) for p in engines.processes) == 2
    finally:
        await manager.close()
        await engines.close()


async def _discard(_simulation_id: int, _events: list[dict[str, Any]]) -> None:
    """The event sink of a test that reads no events."""
