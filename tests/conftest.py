"""Shared fixtures: a real ``ridecast serve`` process on a free port, and users in its store.

``server`` is one process for the whole session (tests isolate themselves with their own
organisations); ``start_server(**env)`` starts another with its own settings and database.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

import httpx
import pytest
from hypothesis import settings as hypothesis_settings

from ridecast.store.accounts import AccountStore
from ridecast.store.engine import create_engine, upgrade
from tests.waiting import eventually

# Property tests are deterministic (same examples every run) and have no deadline: on a busy
# 2-core CI machine a slow example is not a failure.
hypothesis_settings.register_profile("ridecast", derandomize=True, deadline=None)
hypothesis_settings.load_profile("ridecast")


TEST_PASS = os.environ.get("RIDECAST_TEST_PASS", "")
"""Set by ``scripts/test`` when it runs the suite in two passes: ``parallel`` (on xdist
workers, every test but those marked ``serial``), then ``serial`` (those alone, in one
process). Unset: every selected test runs."""


SERIAL_MARK = "@pytest.mark.serial"
"""How a test module marks a test ``serial``: the serial pass imports only the modules whose
text says it (collecting the whole suite again would take longer than the serial tests),
and the parallel pass fails if a test is marked ``serial`` any other way."""


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if (TEST_PASS != "serial" or collection_path.suffix != ".py"
            or not collection_path.name.startswith("test_")):
        return None
    return SERIAL_MARK not in collection_path.read_text(errors="replace") or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if TEST_PASS not in ("parallel", "serial"):
        return
    wanted = TEST_PASS == "serial"
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        if serial and SERIAL_MARK not in item.path.read_text(errors="replace"):
            raise pytest.UsageError(
                f"{item.nodeid} is marked serial without {SERIAL_MARK} in its module: the "
                "serial pass of scripts/test would not collect it")
        (kept if serial == wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class User:
    """A user created directly in a server's store."""

    name: str
    org: str
    key: str
    is_admin: bool = False

    @property
    def auth(self) -> tuple[str, str]:
        return (self.name, self.key)


@dataclass
class Server:
    """A running ``ridecast serve`` subprocess."""

    port: int
    database_url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log_path: Path
    _users: list[User] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def create_user(self, org: str | None = None, *, admin: bool = False) -> User:
        """A new user (and organisation) with an API key, unique per call."""
        name = f"user-{uuid.uuid4().hex[:10]}"
        org = org or f"org-{uuid.uuid4().hex[:8]}"

        async def run() -> str:
            engine = create_engine(self.database_url)
            try:
                _principal, key = await AccountStore(engine).create_user(name, org, is_admin=admin)
            finally:
                await engine.dispose()
            return key

        user = User(name, org, asyncio.run(run()), admin)
        self._users.append(user)
        return user

    def client(self, user: User | None = None, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, auth=user.auth if user else None,
                            timeout=30, **kwargs)  # type: ignore[arg-type]

    def token(self, user: User) -> str:
        with self.client(user) as http:
            response = http.get("/api/v2/user/token/")
            response.raise_for_status()
            return str(response.json()["token"])

    def create_simulation(self, user: User, data: dict[str, object] | None = None,
                          name: str = "test") -> int:
        with self.client(user) as http:
            response = http.post("/api/v2/simulation", json={"name": name, "data": data or {}})
            response.raise_for_status()
            return int(response.json()["id"])

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int | None = None) -> int:
        if self.process.poll() is None:
            if sig is None:
                self.process.terminate()
            else:
                self.process.send_signal(sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


def launch_server(tmp: Path, env: dict[str, str] | None = None, *,
                  database_url: str | None = None, port: int | None = None,
                  args: list[str] | None = None, scheme: str = "http") -> Server:
    """Start ``ridecast serve`` with its own SQLite file (unless given) and wait for /healthz."""
    server = spawn_server(tmp, env, database_url=database_url, port=port, args=args)
    wait_healthy(server, scheme)
    return server


def spawn_server(tmp: Path, env: dict[str, str] | None = None, *,
                 database_url: str | None = None, port: int | None = None,
                 args: list[str] | None = None) -> Server:
    """``launch_server`` without the wait for /healthz (``wait_healthy``): a test that needs
    several servers starts them all, then waits once, so their start-ups overlap. The store
    is upgraded here, before the process starts, so servers spawned together on one
    database find it migrated and do not race to migrate it."""
    port = port or free_port()
    database_url = database_url or f"sqlite+aiosqlite:///{tmp / 'ridecast.db'}"
    full_env = {
        **os.environ,
        "RIDECAST_DATABASE_URL": database_url,
        "RIDECAST_WEBHOOK_ALLOW_PRIVATE": "true",
        "RIDECAST_LOG_LEVEL": "warning",
        **(env or {}),
    }
    asyncio.run(upgrade(database_url))
    log_path = tmp / f"server-{port}.log"
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "ridecast.cli.main", "serve", "--port", str(port),
             *(args or [])],
            env=full_env, stdout=log_file, stderr=subprocess.STDOUT, cwd=tmp,
        )
    return Server(port, database_url, full_env, process, log_path)


def wait_healthy(server: Server, scheme: str = "http") -> None:
    """Wait until a spawned server answers /healthz; stop it and fail with its log if it
    exits or does not answer in time."""
    health = f"{scheme}://127.0.0.1:{server.port}/healthz"

    def healthy() -> bool:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with {server.process.returncode}:\n"
                               f"{server.logs()}")
        return httpx.get(health, timeout=1, verify=False).status_code == 200

    try:
        eventually(healthy, timeout=30, step=0.1, ignoring=(httpx.HTTPError,),
                   what="the server healthy")
    except BaseException as exc:
        server.stop()
        if isinstance(exc, AssertionError):
            raise RuntimeError(f"server did not become healthy:\n{server.logs()}") from None
        raise


def launch_servers(*spawns: Callable[[], Server], scheme: str = "http") -> list[Server]:
    """Start a server with each of ``spawns`` (``spawn_server`` calls), then wait until all
    are healthy: their start-ups overlap. If one cannot start, all are stopped."""
    spawned: list[Server] = []
    try:
        for spawn in spawns:
            spawned.append(spawn())
        for server in spawned:
            wait_healthy(server, scheme)
    except BaseException:
        for server in spawned:
            server.stop()
        raise
    return spawned


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One shared server for the session; isolate tests by organisation."""
    srv = launch_server(tmp_path_factory.mktemp("server"))
    yield srv
    srv.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start a server with extra ``RIDECAST_*`` settings; stopped after the test."""
    started: list[Server] = []

    def start(env: dict[str, str] | None = None, **kwargs: object) -> Server:
        folder = tmp_path / f"s{len(started)}"
        folder.mkdir(exist_ok=True)
        srv = launch_server(folder, env, **kwargs)  # type: ignore[arg-type]
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def service_missing(reason: str) -> NoReturn:
    """A service a test needs (PostgreSQL, Redis) does not answer: the test is skipped on a
    developer's machine, and fails under ``CI=true``, where ``.ci/run`` started them."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: every service must be there)", pytrace=False)
    pytest.skip(reason)


POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_answers(url: str = REDIS_URL) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_timeout=2).ping())
    except (redis.RedisError, OSError):
        return False


@dataclass
class CrossNodeServer(Server):
    """Two ``ridecast serve`` nodes of one cluster (PostgreSQL + Redis) seen as one server:
    requests go to the first node, websocket streams to the second, so every event a test
    sees crossed the bus. Stands in for ``Server`` in the suites run on both backends."""

    other: Server | None = None
    bus_prefix: str = ""

    @property
    def ws_url(self) -> str:
        assert self.other is not None
        return self.other.ws_url

    def logs(self) -> str:
        other = self.other.logs() if self.other is not None else ""
        return f"{super().logs()}\n--- second node ---\n{other}"

    def stop(self, sig: int | None = None) -> int:
        if self.other is not None:
            self.other.stop(sig)
        return super().stop(sig)


def launch_cluster_pair(tmp: Path, env: dict[str, str] | None = None) -> CrossNodeServer:
    """Two nodes on a fresh PostgreSQL database and their own Redis stream; skips the test
    when PostgreSQL or Redis does not answer. ``stop()`` stops both and drops the database."""
    if not redis_answers():
        service_missing(f"no Redis at {REDIS_URL}")
    name = f"ridecast_test_{uuid.uuid4().hex[:10]}"
    try:
        asyncio.run(_postgres_admin(f'CREATE DATABASE "{name}"'))
    except (TimeoutError, OSError) as exc:
        service_missing(f"no PostgreSQL on 127.0.0.1:5432: {exc}")
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    prefix = f"test-{uuid.uuid4().hex[:12]}"
    node_env = {"RIDECAST_BUS_URL": REDIS_URL, "RIDECAST_BUS_PREFIX": prefix, **(env or {})}
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    first, second = launch_servers(
        lambda: spawn_server(tmp / "a", node_env, database_url=url),
        lambda: spawn_server(tmp / "b", node_env, database_url=url))
    return CrossNodeServer(first.port, url, first.env, first.process, first.log_path,
                           other=second, bus_prefix=prefix)


def drop_cluster_pair(pair: CrossNodeServer) -> None:
    """Stop both nodes, drop the database and the bus stream."""
    import redis

    pair.stop()
    name = pair.database_url.rsplit("/", 1)[1]
    asyncio.run(_postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    redis.Redis.from_url(REDIS_URL).delete(f"{pair.bus_prefix}:bus")


BACKENDS = ("embedded", "cluster")
"""The suites of streams and webhooks run on both: one process on SQLite with the
in-process bus, and two nodes on PostgreSQL and Redis (``CrossNodeServer``)."""


def launch_backend(backend: str, tmp: Path, env: dict[str, str] | None = None) -> Server:
    if backend == "cluster":
        return launch_cluster_pair(tmp, env)
    return launch_server(tmp, env)


def stop_backend(srv: Server) -> None:
    if isinstance(srv, CrossNodeServer):
        drop_cluster_pair(srv)
    else:
        srv.stop()


def server_per_backend(label: str, *, scope: Literal["session", "module"] = "session",
                       env: dict[str, str] | None = None) -> Any:
    """A fixture: a shared server once per backend of ``BACKENDS`` (a suite's conftest
    assigns it to the fixture name its tests use)."""

    @pytest.fixture(scope=scope, params=BACKENDS)
    def shared(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
        srv = launch_backend(request.param,
                             tmp_path_factory.mktemp(f"{label}-{request.param}"), env)
        yield srv
        stop_backend(srv)

    return shared


def engine_processes(pid: int) -> list[Any]:
    """The simulator engine processes under process ``pid`` that still run (one that has
    just ended, a zombie or gone, is not counted)."""
    import psutil

    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "engine_process" in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return found


def pg_backends(database_url: str) -> int:
    """Server processes connected to the PostgreSQL database of ``database_url`` (ours not
    counted: it connects to another database)."""
    import asyncpg

    async def count() -> int:
        conn = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=3)
        try:
            return int(await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                database_url.rsplit("/", 1)[1]))
        finally:
            await conn.close()

    return asyncio.run(count())


async def _postgres_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=3)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database, dropped afterwards; skips when none answers."""
    name = f"ridecast_test_{uuid.uuid4().hex[:10]}"
    try:
        asyncio.run(_postgres_admin(f'CREATE DATABASE "{name}"'))
    except (TimeoutError, OSError) as exc:
        service_missing(f"no PostgreSQL on 127.0.0.1:5432: {exc}")
    yield f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    asyncio.run(_postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


STORES = ("sqlite", "postgresql")
"""The two stores; the suites of hostile input run on each (a single node, in-process bus)."""


def launch_store_server(store: str, tmp: Path, env: dict[str, str] | None = None) -> Server:
    """``launch_server`` on a fresh database of ``store``; skips when PostgreSQL does not
    answer. ``stop_store_server`` stops it and drops the database."""
    if store == "sqlite":
        return launch_server(tmp, env)
    name = f"ridecast_test_{uuid.uuid4().hex[:10]}"
    try:
        asyncio.run(_postgres_admin(f'CREATE DATABASE "{name}"'))
    except (TimeoutError, OSError) as exc:
        pytest.skip(f"no PostgreSQL on 127.0.0.1:5432: {exc}")
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    try:
        return launch_server(tmp, env, database_url=url)
    except BaseException:
        asyncio.run(_postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        raise


def stop_store_server(srv: Server) -> None:
    srv.stop()
    if srv.database_url.startswith("postgresql"):
        name = srv.database_url.rsplit("/", 1)[1]
        asyncio.run(_postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def server_per_store(label: str, *, scope: Literal["session", "module"] = "module",
                     env: dict[str, str] | None = None) -> Any:
    """A fixture: a server once per store of ``STORES`` (a module assigns it to the
    fixture name its tests use)."""

    @pytest.fixture(scope=scope, params=STORES)
    def shared(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
        srv = launch_store_server(request.param,
                                  tmp_path_factory.mktemp(f"{label}-{request.param}"), env)
        yield srv
        stop_store_server(srv)

    return shared


def store_execute(srv: Server, *statements: str) -> None:
    """Run SQL statements straight on ``srv``'s store (SQLite file or PostgreSQL), as an
    operator's tool would: each its own transaction."""
    if srv.database_url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(srv.database_url.split("///", 1)[1]) as db:
            for statement in statements:
                db.execute(statement)
        return

    async def run() -> None:
        import asyncpg

        conn = await asyncpg.connect(srv.database_url.replace("+asyncpg", ""), timeout=5)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())
