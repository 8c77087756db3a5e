"""``ridecast demo`` as a subprocess, and the instructions it prints, as a new user reads them.

Shared by the demo's CLI tests and the dashboard's browser tests.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import free_port
from tests.waiting import eventually

READY_TIMEOUT_S = 60.0
PRINTED_PREFIXES = ("http://", "curl ", "export ", "ridecast listen", "ws://")
"""How each line of the printed block starts: it is complete once all of them came."""


@dataclass
class Printed:
    """The lines of the printed block that a user copies."""

    dashboard_url: str
    curl: str
    export: str
    listen: str
    websocket_url: str

    def export_env(self) -> dict[str, str]:
        """The variables of the ``export A=1 B=2`` line."""
        words = shlex.split(self.export)
        assert words[0] == "export", self.export
        return dict(word.split("=", 1) for word in words[1:])


def parse_printed(lines: list[str]) -> Printed:
    """Find each command by how it starts, as a reader scanning the block would."""

    def first(prefix: str) -> str:
        found = [line.strip() for line in lines if line.strip().startswith(prefix)]
        assert found, f"no line starting with {prefix!r} in:\n" + "\n".join(lines)
        return found[0]

    return Printed(
        dashboard_url=first("http://"),
        curl=first("curl "),
        export=first("export "),
        listen=first("ridecast listen"),
        websocket_url=first("ws://"),
    )


def ridecast_argv(command: str) -> list[str]:
    """A printed ``ridecast ...`` line as argv for this interpreter (same package)."""
    words = shlex.split(command)
    assert words[0] == "ridecast", command
    return [sys.executable, "-m", "ridecast.cli.main", *words[1:]]


@dataclass
class DemoProcess:
    """A running ``ridecast demo``; stdout lines are collected by a reader thread."""

    port: int
    data_dir: Path
    process: subprocess.Popen[str]
    stderr_path: Path
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> Printed:
        """Block until the instructions are printed (the server is up by then)."""
        def block() -> Printed | None:
            lines = list(self.lines)
            if all(any(line.strip().startswith(p) for line in lines) for p in PRINTED_PREFIXES):
                return parse_printed(lines)
            assert self.process.poll() is None, (
                f"ridecast demo exited ({self.process.poll()}) before printing its instructions:"
                "\n" + "\n".join(lines) + "\n" + self.stderr())
            return None

        return eventually(block, timeout=timeout, what="ridecast demo printing its instructions",
                          why=lambda: "\n".join(self.lines) + "\n" + self.stderr())

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    # The test checks that the demo exits cleanly, not how fast: on a machine shared with
    # the suite's other workers a clean stop (runs, streams, store) can take tens of seconds.
    def stop(self, sig: int | None = None, timeout: float = 60) -> int:
        if self.process.poll() is None:
            if sig is None:
                self.process.terminate()
            else:
                self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.reader is not None:
            self.reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return int(self.process.returncode)


def launch_demo(data_dir: Path, *, port: int | None = None,
                extra_env: dict[str, str] | None = None,
                args: list[str] | None = None) -> DemoProcess:
    """Start ``ridecast demo --port P --data-dir D`` (and ``args``; nothing else configured)."""
    port = port or free_port()
    # A clean environment for ridecast: the demo must not need any RIDECAST_* setting.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIDECAST_")}
    env.update(extra_env or {})
    stderr_path = data_dir.parent / f"demo-{port}.stderr"
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "ridecast.cli.main", "demo", "--port", str(port),
             "--data-dir", str(data_dir), *(args or [])],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=data_dir.parent,
        )
    demo = DemoProcess(port, data_dir, process, stderr_path)
    demo.reader = threading.Thread(target=demo._read, daemon=True)
    demo.reader.start()
    return demo
