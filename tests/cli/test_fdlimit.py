"""``ridecast serve`` lifts its open-file limit to the hard limit: one descriptor per stream."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import free_port
from tests.waiting import eventually


def _low_soft_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))


def test_serve_raises_the_soft_open_file_limit_to_the_hard_one(tmp_path: Path) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    port = free_port()
    env = {**os.environ, "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port)],
        env=env, cwd=tmp_path, preexec_fn=_low_soft_limit,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        eventually(lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                   .status_code == 200, timeout=30, step=0.1, ignoring=(httpx.HTTPError,),
                   what="the server healthy")
        limits = Path(f"/proc/{process.pid}/limits").read_text()
        match = re.search(r"Max open files\s+(\d+)\s+(\d+)", limits)
        assert match is not None, limits
        assert (int(match[1]), int(match[2])) == (hard, hard)
    finally:
        process.terminate()
        process.wait(timeout=15)
