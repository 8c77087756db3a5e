"""``ridecast serve`` at the default level prints where the data is and the URLs, nothing else."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from ridecast.cli.serve import ready_line
from tests.cli.test_first_run import plain_env
from tests.conftest import free_port

TIMEOUT_S = 60


def _start_and_read(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """Start a real ``serve`` with ``env``; its stdout and stderr up to its ready line."""
    port = free_port()
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=stdout, stderr=stderr,
        )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while "ridecast ready:" not in err.read_text(errors="replace"):
            assert process.poll() is None, err.read_text(errors="replace")
            assert time.monotonic() < deadline, err.read_text(errors="replace")
            time.sleep(0.05)
        # Read while it still runs: what it prints on shutdown is not start-up.
        return out.read_text(errors="replace"), err.read_text(errors="replace")
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT_S)


def test_a_first_start_prints_the_data_directory_and_the_urls_only(tmp_path: Path) -> None:
    """A new user's first start (empty folder, no RIDECAST_*): two lines, no alembic, no
    uvicorn chatter (issue 35 item 5)."""
    stdout, stderr = _start_and_read(tmp_path, plain_env())
    lines = stderr.splitlines()
    data = tmp_path / "ridecast-data"
    assert lines[0] == (f"ridecast: using data directory {data.resolve()} "
                        "(set RIDECAST_DATABASE_URL to change)"), stderr
    port = int(lines[1].split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
    assert lines[1:] == [ready_line(f"http://127.0.0.1:{port}", None, "http")], stderr
    assert stdout == ""


def test_debug_keeps_what_the_default_level_hides(tmp_path: Path) -> None:
    """RIDECAST_LOG_LEVEL=debug shows uvicorn's start-up lines again (nothing is lost)."""
    _stdout, stderr = _start_and_read(tmp_path, {**plain_env(), "RIDECAST_LOG_LEVEL": "debug"})
    assert "Application startup complete" in stderr
    assert "database schema migrated" in stderr
