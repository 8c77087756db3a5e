"""A new user's first minutes: clone, run the README's first command, paste what it prints.

Clones the committed HEAD of this checkout into an empty folder, runs the README's first
command (``scripts/demo``, on a free port) in a plain environment without any venv on
PATH, and runs every command the demo prints, verbatim, in ``bash``: the ``curl``, the
``export`` and ``listen`` lines, the dashboard and API docs links (fetched, and the docs must
load nothing from another host), and the websocket URL (opened). It also measures the time
from the clone to the demo's first printed command, the install's own share of it and the
size of the installed ``.venv``, and writes them to ``test-artifacts/fresh-clone.json``.

The installers' caches are the machine's (warm once ``scripts/test`` has installed the dev
extras the same way): pip's and uv's settings (``PIP_*``, ``UV_*``) and ``XDG_CACHE_HOME``
come along. ``RIDECAST_INSTALLER=pip`` in the environment is passed on too, to measure the
pip fallback the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import websockets

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
INSTALL_AND_START_S = 420  # a fresh .venv on a loaded machine (pip fallback included)
COMMAND_S = 60


def readme_first_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None
    return block.group(1).splitlines()[0].split("#", 1)[0].strip()


def plain_env(home: Path) -> dict[str, str]:
    """No venv, no RIDECAST_* (but the installer's choice): the system PATH, a home, and
    the machine's pip and uv settings and caches."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items()
                if k.startswith(("PIP_", "UV_")) or k == "RIDECAST_INSTALLER"})
    if "HOME" in os.environ:  # the warm caches (pip's, uv's, and uv itself) live there
        env["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME",
                                               str(Path(os.environ["HOME"]) / ".cache"))
    return env


@pytest.mark.slow
def test_fresh_clone_demo_prints_commands_that_work_verbatim(tmp_path: Path) -> None:
    for tool in ("git", "curl", "bash"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    clone = tmp_path / "clone"
    started = time.monotonic()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    env = plain_env(tmp_path)
    port = free_port()
    first = readme_first_command()
    assert first == "scripts/demo"
    demo = subprocess.Popen(["bash", "-c", f"{first} --port {port}"], cwd=clone, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    done = threading.Event()
    first_command_s: list[float] = []

    def read() -> None:
        assert demo.stdout is not None
        for line in demo.stdout:
            lines.append(line.rstrip("\n"))
            if not first_command_s and line.startswith(("http://", "curl ")):
                first_command_s.append(time.monotonic() - started)
            if line.startswith("API docs:"):
                done.set()
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert done.wait(INSTALL_AND_START_S), "\n".join(lines)
        printed = {name: next((ln for ln in lines if ln.startswith(prefix)), "")
                   for name, prefix in (("dashboard", "http://"), ("curl", "curl "),
                                        ("export", "export "), ("ws", "ws://"))}
        listen = next((ln for ln in lines if re.match(r"^\S*ridecast listen \d+$", ln)), "")
        assert all(printed.values()) and listen, "\n".join(lines)
        assert listen.startswith(".venv/bin/ridecast "), listen  # runnable without a venv

        token = subprocess.run(["bash", "-c", printed["curl"]], cwd=clone, env=env,
                               capture_output=True, text=True, timeout=COMMAND_S)
        assert token.returncode == 0 and '"token"' in token.stdout, token.stderr
        page = subprocess.run(["bash", "-c", f"curl -sf '{printed['dashboard']}'"], cwd=clone,
                              env=env, capture_output=True, text=True, timeout=COMMAND_S)
        assert page.returncode == 0 and "<html" in page.stdout.lower()
        assert "key=" not in printed["dashboard"]  # the link carries no credential

        docs_line = next(ln for ln in lines if ln.startswith("API docs:"))
        docs_url = re.search(r"http://\S+/docs", docs_line)
        assert docs_url is not None, docs_line
        docs = subprocess.run(["bash", "-c", f"curl -sf '{docs_url.group(0)}'"], cwd=clone,
                              env=env, capture_output=True, text=True, timeout=COMMAND_S)
        assert docs.returncode == 0 and "swagger-ui" in docs.stdout, docs.stderr
        assets = re.findall(r'(?:src|href)="([^"]+)"', docs.stdout)
        assert assets and all(a.startswith("/") for a in assets), assets  # works offline

        stream = subprocess.Popen(["bash", "-c", f"{printed['export']}\n{listen}"], cwd=clone,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        try:
            assert stream.stdout is not None
            got = [stream.stdout.readline() for _ in range(2)]
            assert all(line.strip() for line in got), got
        finally:
            os.killpg(stream.pid, signal.SIGTERM)
            stream.communicate(timeout=COMMAND_S)  # also closes its pipes

        async def one_frame() -> str | bytes:
            async with websockets.connect(printed["ws"], open_timeout=10) as ws:
                return await asyncio.wait_for(ws.recv(), COMMAND_S)

        assert asyncio.run(one_frame())
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(COMMAND_S)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        reader.join(COMMAND_S)
        assert demo.stdout is not None
        demo.stdout.close()
    venv = subprocess.run(["du", "-sk", str(clone / ".venv")], capture_output=True, text=True,
                          timeout=COMMAND_S)
    installed = next((m for ln in lines if (m := re.match(r"ridecast: installed in (\d+) s", ln))),
                     None)
    installer = "uv" if any(" with uv " in ln for ln in lines) else "pip"
    figures = {"clone_to_first_printed_command_s": round(first_command_s[0], 1),
               "install_s": int(installed.group(1)) if installed else None,
               "installer": installer, "venv_kib": int(venv.stdout.split()[0])}
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "fresh-clone.json").write_text(json.dumps(figures) + "\n")
    print(f"fresh clone: {figures}")
