"""Shared bench helpers: a lean keep-alive HTTP/1.1 load generator, percentiles, the bench
user, the stores of contenders and throw-away PostgreSQL databases.

The generator speaks just enough HTTP/1.1 over asyncio streams (Content-Length bodies,
keep-alive) so that the client costs far less than the server it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def raise_nofile() -> None:
    """Lift this process's open-file limit to the hard limit (thousands of sockets)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class LoadResult:
    """Requests done, seconds taken, per-request latencies (s), status codes seen."""

    requests: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def summary(self, per_request: int = 1) -> str:
        ms = [x * 1000 for x in self.latencies]
        return (f"{self.rps * per_request:10.0f} ev/s  {self.rps:8.0f} req/s  "
                f"p50 {percentile(ms, 50):6.2f} ms  p99 {percentile(ms, 99):6.2f} ms  "
                f"mean {statistics.fmean(ms) if ms else float('nan'):6.2f} ms")


def basic_auth(user: str, key: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()


async def _one_connection(port: int, request: bytes, deadline: float, result: LoadResult) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            result.latencies.append(time.perf_counter() - started)
            result.statuses[status] = result.statuses.get(status, 0) + 1
            result.requests += 1
    finally:
        writer.close()


async def run_load(port: int, method: str, path: str, body: bytes, headers: dict[str, str],
                   *, connections: int, seconds: float) -> LoadResult:
    """``connections`` keep-alive connections sending the same request for ``seconds``."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
    head += "Content-Type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = head.encode() + b"\r\n" + body
    result = LoadResult(0, 0.0)
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(*(_one_connection(port, request, deadline, result)
                           for _ in range(connections)))
    result.seconds = time.perf_counter() - started
    return result


# Settings a bench must set to run at all, not to run faster: where the store is, the bus.
_WHERE = {"RIDECAST_DATABASE_URL", "RIDECAST_BUS_URL", "RIDECAST_BUS_PREFIX"}


def changed_defaults(env: dict[str, str]) -> list[str]:
    """One line per ``RIDECAST_*`` setting in ``env`` that differs from its default (but for
    the store and bus addresses), naming both values: a bench says what it changes."""
    from ridecast.config import Settings

    lines = []
    for name, field_info in Settings.model_fields.items():
        var = f"RIDECAST_{name.upper()}"
        default = field_info.default
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        if var in env and var not in _WHERE and env[var] not in (shown, str(default)):
            lines.append(f"{var}={env[var]} (default {shown})")
    return lines


def say_changed_defaults(who: str, env: dict[str, str]) -> None:
    """Print which defaults ``who`` runs with changed, or that it runs with the defaults."""
    changed = changed_defaults(env)
    print(f"{who}: " + ("; ".join(changed) if changed
                        else "the default settings (but for the store's address)"))


def wait_http(port: int, path: str, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answers on port {port}")


def spawn(args: list[str], env: dict[str, str] | None = None,
          cwd: str | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


Progress = Callable[[str], None]


async def make_user(url: str) -> str:
    """Migrate the store at ``url`` and create the user ``bench``; its API key."""
    from ridecast.store.accounts import AccountStore
    from ridecast.store.engine import create_engine, upgrade

    await upgrade(url)
    engine = create_engine(url)
    try:
        _principal, key = await AccountStore(engine).create_user("bench", "bench-org")
    finally:
        await engine.dispose()
    return key


def _pg_admin(admin_url: str, sql: str) -> None:
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(admin_url, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def create_pg_database(admin_url: str, name: str) -> str | None:
    """A new database ``name`` on the server of ``admin_url``: its SQLAlchemy URL, or None
    (with a line saying so) when no PostgreSQL answers there."""
    try:
        _pg_admin(admin_url, f'CREATE DATABASE "{name}"')
    except (OSError, TimeoutError) as exc:
        print(f"(no PostgreSQL at {admin_url}: {exc}; measuring SQLite only)")
        return None
    base = admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"{base}/{name}"


def drop_pg_database(admin_url: str, name: str) -> None:
    _pg_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# The integers 1 to ``:n`` as a FROM item (column ``g``), per dialect: the benches that
# write rows straight into a store.
SERIES = {
    "postgresql": "generate_series(1, CAST(:n AS bigint)) AS g",
    "sqlite": "(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < :n) "
              "SELECT g FROM s)",
}


def make_user_child(url: str) -> None:
    """Migrate the store at ``url`` with the ridecast on ``sys.path`` and print the API key
    of a new user ``bench`` (a bench runs it as a child under a contender's source tree)."""
    print(asyncio.run(make_user(url)))


def contender_stores(names: list[str], tmp: Path, admin_url: str, prefix: str,
                     ) -> tuple[dict[str, dict[str, str]], list[str]]:
    """A store per contender (``names``): a SQLite file in ``tmp`` each, and a new
    PostgreSQL database each on the server of ``admin_url`` (none when it is empty or no
    server answers). (store -> contender -> URL, the PostgreSQL databases created)."""
    stores = {"SQLite": {name: f"sqlite+aiosqlite:///{tmp / f'{name}.db'}" for name in names}}
    created: list[str] = []
    if admin_url:
        pg = {}
        for name in names:
            db = f"{prefix}_{os.getpid()}_{name}"
            if (url := create_pg_database(admin_url, db)) is not None:
                created.append(db)
                pg[name] = url
        if pg:
            stores["PostgreSQL"] = pg
    return stores, created


def contender_args(parser: argparse.ArgumentParser) -> None:
    """The options of a bench that runs ``ridecast serve`` per store and per source tree:
    ``--postgres``, ``--base-src``, and the hidden ``--make-user`` of its child
    (``make_user_child``)."""
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="an administrative URL where databases may be created "
                             "(empty: SQLite only)")
    parser.add_argument("--base-src", default="",
                        help="a ridecast source tree (its src/ directory) to measure as "
                             "'base', beside this one in the same run")
    parser.add_argument("--make-user", help=argparse.SUPPRESS)
