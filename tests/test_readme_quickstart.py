"""The README's Quickstart, run as a reader runs it: every bash block, in order, in one shell.

The blocks are read from the README.md of a fresh clone of the committed HEAD (so the
README cannot drift from what works) and run twice, each time in its own clone, in a plain
environment without any venv on PATH: once fresh, and once after ``scripts/demo`` has run and
been stopped there (its simulation is id 1, so the Quickstart's is 2; its ``.venv`` is what the
Quickstart's ``scripts/install`` finds). Real processes throughout: the install, ``ridecast
serve``, ``ridecast users``, curl, ``ridecast receiver``.

One change is made to the text: ports 8000 and 9000 become free ports, because this machine
is shared and a fixed port may be taken. Whatever the blocks start in the background (the
server, the receiver) is killed with their process group at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.test_fresh_clone import ROOT, plain_env
from tests.waiting import eventually

INSTALL_AND_RUN_S = 420  # a fresh .venv on a loaded machine (pip fallback included)
STEP_S = 60


def quickstart_blocks(readme: str) -> list[str]:
    """The bash blocks of the Quickstart section, in order."""
    section = re.search(r"^## Quickstart\n(.*?)^## ", readme, re.S | re.M)
    assert section is not None, "README.md has no Quickstart section"
    return re.findall(r"```bash\n(.*?)```", section.group(1), re.S)


def with_ports(script: str, server: int, receiver: int) -> str:
    return re.sub(r"\b9000\b", str(receiver), re.sub(r"\b8000\b", str(server), script))


def stop_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGTERM the process group (the shell and its background jobs), SIGKILL what stays."""
    with_group = True
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        with_group = False
    deadline = time.monotonic() + STEP_S
    while with_group and time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        if with_group:
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(STEP_S)


def clone(tmp: Path, name: str) -> Path:
    target = tmp / name
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True, timeout=120)
    return target


def run_demo_once(folder: Path, env: dict[str, str]) -> None:
    """The README's first command, ``scripts/demo``, until it prints its commands; then
    Ctrl-C, as a reader would before the Quickstart."""
    port = free_port()
    demo = subprocess.Popen(["bash", "-c", f"scripts/demo --port {port}"], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert demo.stdout is not None
        for line in demo.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("API docs:"):
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(INSTALL_AND_RUN_S) and any(
            ln.startswith("API docs:") for ln in lines), "\n".join(lines)
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(STEP_S)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        reader.join(STEP_S)
        assert demo.stdout is not None
        demo.stdout.close()
    assert demo.returncode == 0, "\n".join(lines)


def run_quickstart(folder: Path, env: dict[str, str], expected_sim: int) -> None:
    blocks = quickstart_blocks((folder / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) == 2, "the Quickstart has its steps and the webhook's"
    server_port, receiver_port = free_port(), free_port()
    script = with_ports("\n".join(blocks), server_port, receiver_port)
    out, err = folder / "quickstart.out", folder / "quickstart.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        # -e: a failing command (install, users create, a refused PATCH piped nowhere) stops
        # the run, so the checks below see where it went wrong.
        shell = subprocess.Popen(["bash", "-e", "-c", script], cwd=folder, env=env,
                                 stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        code = shell.wait(INSTALL_AND_RUN_S)
        text = out.read_text(errors="replace")
        problem = f"exit {code}\n--- stdout\n{text}\n--- stderr\n{err.read_text()[-4000:]}"
        assert code == 0, problem
        # Each step did what its comment says.
        assert re.search(r'\{"token":"[0-9a-f-]{36}"\}', text), problem
        assert f"simulation {expected_sim}\n" in text, problem
        assert re.search(r'\{"event_ids":\["\d+"\],"count":1\}', text), problem
        assert '"message_type":"vehicle_use"' in text, problem  # read back
        assert '"messaging_webhook_url":"http://127.0.0.1:' in text, problem  # PATCH accepted
        assert '"ok":true' in text, problem  # the test delivery reached the receiver
        # The receiver printed the delivery it got.
        eventually(lambda: "/hook" in out.read_text(errors="replace"), timeout=STEP_S, step=0.2,
                   what="the receiver logging /hook", why=problem)
        assert "webhook_test" in out.read_text(errors="replace"), problem
    finally:
        stop_group(shell)


@pytest.mark.slow
def test_quickstart_works_verbatim_in_a_fresh_clone(tmp_path: Path) -> None:
    for tool in ("git", "curl", "bash"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    folder = clone(tmp_path, "fresh")
    run_quickstart(folder, plain_env(tmp_path), expected_sim=1)


@pytest.mark.slow
def test_quickstart_works_verbatim_after_the_demo(tmp_path: Path) -> None:
    for tool in ("git", "curl", "bash"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    folder = clone(tmp_path, "after-demo")
    env = plain_env(tmp_path)
    run_demo_once(folder, env)
    assert (folder / "ridecast-data" / "ridecast.db").exists()
    run_quickstart(folder, env, expected_sim=2)


def test_the_quickstart_blocks_are_found_and_name_free_ports() -> None:
    """The extraction itself, on this checkout's README (no processes)."""
    blocks = quickstart_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    joined = "\n".join(blocks)
    assert "ridecast serve" in joined and "ridecast receiver" in joined
    assert "RIDECAST_WEBHOOK_ALLOW_PRIVATE=true ridecast serve" in joined
    assert "/simulation/1/" not in joined  # the id is the one the server gave
    moved = with_ports(joined, 18001, 19001)
    assert "8000" not in moved and "9000" not in moved
