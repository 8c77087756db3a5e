"""The CPUs a serving process counts for its engine processes: CPU set and cgroup quota."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.simulator.hosting.cpus import (
    cgroup_paths,
    cpu_set_size,
    parse_cpu_max,
    quota_cpus,
    usable_cpus,
)
from ridecast.simulator.hosting.engine_pool import default_size


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@given(st.text(max_size=40))
def test_cpu_max_parsing_never_fails_and_never_gives_a_non_positive_limit(text: str) -> None:
    limit = parse_cpu_max(text)
    assert limit is None or limit > 0


@given(st.integers(1, 10**9), st.integers(1, 10**7))
def test_cpu_max_gives_quota_over_period(quota: int, period: int) -> None:
    assert parse_cpu_max(f"{quota} {period}\n") == quota / period
    assert parse_cpu_max(f"max {period}\n") is None
    assert parse_cpu_max(f"-{quota} {period}") is None


def test_proc_cgroup_names_the_v2_path_and_the_v1_cpu_controller() -> None:
    hybrid = "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/user.slice/app\n"
    assert cgroup_paths(hybrid) == ("/user.slice/app", "/docker/abc")
    assert cgroup_paths("0::/\n") == ("/", None)
    assert cgroup_paths("garbage\n1:cpu:relative\n") == (None, None)


def test_the_tightest_v2_quota_on_the_way_to_the_root_counts(tmp_path: Path) -> None:
    _write(tmp_path / "cpu.max", "max 100000\n")
    _write(tmp_path / "kubepods" / "cpu.max", "300000 100000\n")
    _write(tmp_path / "kubepods" / "pod" / "cpu.max", "150000 100000\n")
    _write(tmp_path / "kubepods" / "pod" / "app" / "cpu.max", "max 100000\n")
    assert quota_cpus(tmp_path, "0::/kubepods/pod/app\n") == 1.5
    # A parent's limit binds a child that has none of its own.
    assert quota_cpus(tmp_path, "0::/kubepods/other\n") == 3.0
    # Inside a cgroup namespace the process sees itself at the root.
    _write(tmp_path / "cpu.max", "50000 100000\n")
    assert quota_cpus(tmp_path, "0::/\n") == 0.5
    assert usable_cpus(tmp_path, "0::/\n") == 1


def test_a_v1_quota_counts_and_minus_one_means_none(tmp_path: Path) -> None:
    base = tmp_path / "cpu,cpuacct"
    _write(base / "cpu.cfs_quota_us", "-1\n")
    _write(base / "cpu.cfs_period_us", "100000\n")
    assert quota_cpus(tmp_path, "3:cpu,cpuacct:/\n") is None
    # In a container, /proc/self/cgroup names a path the container's mount does not have:
    # the mount's own root holds the container's quota.
    _write(base / "cpu.cfs_quota_us", "200000\n")
    assert quota_cpus(tmp_path, "3:cpu,cpuacct:/docker/abc\n") == 2.0


def test_no_cgroup_files_or_an_escaping_path_mean_the_cpu_set_alone(tmp_path: Path) -> None:
    assert quota_cpus(tmp_path, "0::/a/b\n") is None
    _write(tmp_path / "cpu.max", "100000 100000\n")
    _write(tmp_path / "a" / "cpu.max", "max 100000\n")
    assert quota_cpus(tmp_path, "0::/a/../../etc\n") == 1.0
    assert usable_cpus(tmp_path / "none", "0::/\n") == cpu_set_size()


def test_engine_processes_default_to_the_quotas_cpus_but_one(tmp_path: Path) -> None:
    _write(tmp_path / "cpu.max", "250000 100000\n")
    cpus = usable_cpus(tmp_path, "0::/\n")
    assert cpus == min(cpu_set_size(), 3)
    assert default_size(cpus) == max(1, cpus - 1)


def test_a_process_pinned_to_one_cpu_counts_one() -> None:
    """The CPU set half, in a real child process pinned to a single CPU."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU sets on this platform")
    first = min(os.sched_getaffinity(0))
    code = (f"import os; os.sched_setaffinity(0, {{{first}}});"
            "from ridecast.simulator.hosting.engine_pool import default_size;"
            "from ridecast.simulator.hosting.cpus import usable_cpus;"
            "print(usable_cpus(), default_size())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["1", "1"]
