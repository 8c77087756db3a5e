"""A private ``redis-server`` for tests that break Redis: killed, restarted or paused at
will on a free port, so the machine's Redis (6379, shared) is never touched."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import redis

from tests.conftest import service_missing
from tests.waiting import eventually


class PrivateRedis:
    """A ``redis-server`` that keeps nothing on disk, on ``port``; killed and restarted at will."""

    def __init__(self, port: int, folder: Path) -> None:
        self.port = port
        self.folder = folder
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            service_missing("no redis-server binary")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        eventually(lambda: redis.Redis.from_url(self.url, socket_timeout=1).ping(), timeout=10,
                   ignoring=(redis.RedisError, OSError),
                   what="the private redis-server answering")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the port still accepts connections, and nothing answers (a hung Redis)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
