"""How many CPUs this process may use: its CPU set, and its cgroup's CPU quota.

A container limited by a quota (``docker run --cpus``, a Kubernetes CPU limit) still sees
every CPU of its host in its CPU set; the limit is in its cgroup: ``cpu.max`` on cgroup v2,
``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` on v1. The tightest quota on the way from
the process's cgroup up to the hierarchy's root counts, rounded up to whole CPUs (a quota of
1.5 CPUs lets two threads run part of the time). Files that are missing or unreadable, or
that say something this does not understand, mean no limit: the CPU set alone counts.
"""

from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _ratio(quota_text: str, period_text: str) -> float | None:
    try:
        quota, period = int(quota_text), int(period_text)
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def parse_cpu_max(text: str) -> float | None:
    """The CPUs a cgroup v2 ``cpu.max`` (``"QUOTA PERIOD"``, or ``"max PERIOD"``) allows;
    None for no limit.

    >>> parse_cpu_max("150000 100000\\n"), parse_cpu_max("max 100000")
    (1.5, None)
    """
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    return _ratio(parts[0], parts[1])


def cgroup_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """The process's cgroup v2 path and its v1 ``cpu`` controller's path, from the text of
    ``/proc/self/cgroup`` (lines ``ID:CONTROLLERS:PATH``; v2's is ``0::PATH``)."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        if not sep or not path.startswith("/"):
            continue
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _upwards(base: Path, path: str) -> list[Path]:
    """``base/path`` and each of its parents up to ``base``; a path that climbs out of
    ``base`` gives ``base`` alone."""
    parts = PurePosixPath(path).parts[1:]
    if ".." in parts:
        parts = ()
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def quota_cpus(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> float | None:
    """The tightest CPU quota over this process's cgroup and its parents, in CPUs; None when
    there is none (see the module docstring)."""
    if proc_cgroup is None:
        proc_cgroup = _read(PROC_CGROUP)
        if proc_cgroup is None:
            return None
    v2, v1 = cgroup_paths(proc_cgroup)
    limits: list[float] = []
    if v2 is not None:
        for directory in _upwards(root, v2):
            text = _read(directory / "cpu.max")
            limit = parse_cpu_max(text) if text is not None else None
            if limit is not None:
                limits.append(limit)
    if v1 is not None:
        # The v1 cpu controller is mounted as "cpu", or joined with cpuacct.
        for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
            for directory in _upwards(root / mount, v1):
                quota = _read(directory / "cpu.cfs_quota_us")
                period = _read(directory / "cpu.cfs_period_us")
                if quota is not None and period is not None:
                    limit = _ratio(quota.strip(), period.strip())
                    if limit is not None:
                        limits.append(limit)
    return min(limits, default=None)


def cpu_set_size() -> int:
    """CPUs in this process's CPU set (all of the machine's where there is no such thing)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def usable_cpus(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> int:
    """CPUs this process may use: its CPU set, cut to its cgroup's quota rounded up."""
    cpus = cpu_set_size()
    quota = quota_cpus(root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)
