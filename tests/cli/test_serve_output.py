"""``ridecast serve`` at the default level prints where the data is and the URLs, nothing else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ridecast.cli.serve import ready_line
from tests.cli.test_first_run import plain_env
from tests.conftest import free_port
from tests.waiting import eventually

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
        eventually(lambda: _ready(process, err), timeout=TIMEOUT_S, what="ridecast ready",
                   why=lambda: err.read_text(errors="replace"))
        # Read while it still runs: what it prints on shutdown is not start-up.
        return out.read_text(errors="replace"), err.read_text(errors="replace")
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT_S)


def _ready(process: subprocess.Popen[bytes], err: Path) -> bool:
    """Whether the server said it is ready; fails at once if it exited instead."""
    said = err.read_text(errors="replace")
    assert process.poll() is None, said
    return "ridecast ready:" in said


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


def _serve_a_few_requests(tmp_path: Path, env: dict[str, str]) -> str:
    """Start a real ``serve``, send a request through uvicorn's cycle and one through the
    direct ingest path, stop it with SIGTERM; everything it printed (stderr, then stdout,
    where uvicorn writes its access lines)."""
    import httpx

    port = free_port()
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=stderr,
        )
    try:
        eventually(lambda: _ready(process, err), timeout=TIMEOUT_S, what="ridecast ready",
                   why=lambda: err.read_text(errors="replace"))
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.post(f"{base}/api/v2/simulation/1/events", json={}).status_code == 401
    finally:
        process.terminate()
        stdout, _ = process.communicate(timeout=TIMEOUT_S)
    return err.read_text(errors="replace") + stdout.decode(errors="replace")


def test_the_default_server_writes_no_access_log_and_no_pool_chatter(tmp_path: Path) -> None:
    """With the defaults, requests print nothing (no access line interleaved with the
    Quickstart's output), and a stop prints no SQLAlchemy pool bookkeeping (issue 53)."""
    stderr = _serve_a_few_requests(tmp_path, plain_env())
    assert "GET /healthz" not in stderr, stderr
    assert "/events HTTP" not in stderr, stderr
    assert "Pool disposed" not in stderr and "Pool recreating" not in stderr, stderr


def test_ridecast_access_log_turns_the_access_log_on(tmp_path: Path) -> None:
    """RIDECAST_ACCESS_LOG=true logs one line per request, on both request paths."""
    stderr = _serve_a_few_requests(tmp_path, {**plain_env(), "RIDECAST_ACCESS_LOG": "true"})
    assert '"GET /healthz HTTP/1.1" 200' in stderr, stderr
    assert '"POST /api/v2/simulation/1/events HTTP/1.1" 401' in stderr, stderr
