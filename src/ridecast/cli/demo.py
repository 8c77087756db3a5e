"""``ridecast demo``: a live ridesharing simulation and its dashboard, in one command.

On the embedded default (SQLite in the data folder, in-process bus, webhooks allowed to reach
loopback), the demo creates or reuses the ``demo`` organisation and user, keeps the user's API
key in ``<data-dir>/demo-credentials.json`` (mode 0600; the store keeps keys hashed only),
starts the server, creates or reuses a demo simulation and starts its simulator in real time,
and prints what a new user needs: the dashboard link, the key, a token, and ``curl`` and
``ridecast listen`` commands ready to paste. Ctrl-C or SIGTERM stops it cleanly; running it
again reuses the user and the simulation, and its simulator's run goes on (taken over, see
docs/simulator-ownership.md; a finished run is followed by a new one).

The pure parts (the settings of the demo simulation, the printed commands, the credentials
file's content) are apart from the I/O that uses them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import shutil
import signal
import stat
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from ..errors import RidecastError, Unauthorized
from .netcheck import port_free
from .output import styling
from .simulations_cmd import run_identity

# The settings, their validation and the HTTP client are imported where they are used, so
# ``demo --help`` needs none of them.
if TYPE_CHECKING:
    import httpx

    from ..config import Settings

DEMO_ORG = "demo"
DEMO_USER = "demo"
DEMO_SIMULATION_NAME = "ridecast demo"
CREDENTIALS_FILE = "demo-credentials.json"
DATABASE_FILE = "ridecast.db"

# A pooled service in central Gothenburg sized to work: 40 vehicles for 180 requests an hour
# serve nearly every request a rider accepts, with waits of about four minutes (the figures
# and how fleet, demand and KPIs relate: docs/simulator.md, "Sizing a fleet"). Seed 295
# starts busy: the first vehicle moves within seconds, and all 18 event types occur within
# the first hour (vehicle breaks and a few refusals included); tests/cli/test_demo.py
# checks both.
DEMO_SIMULATOR: dict[str, Any] = {
    "seed": 295,
    "vehicles": 40,
    "capacity": 4,
    "bookings_per_hour": 180,
    # Flat in time, demand and traffic alike (no hourly noise either): the demo starts now,
    # and must be as busy at 03:00 as at 17:00. It also makes the clock hour of the start
    # irrelevant, so with the start on a whole second (the default start is) one seed gives
    # the same run, the same events in the same order shifted in time, whenever it starts.
    "demand_profile": [1.0] * 24,
    "congestion_profile": [1.25] * 24,
    "congestion_noise": 0.0,
    "duration_s": 4 * 3600,
    "gps_interval_s": 1,
    "area": {"lat": 57.705, "lon": 11.963, "radius_m": 5000},  # Gothenburg: on the streets
}


@dataclass(frozen=True, slots=True)
class DemoCredentials:
    """What the demo keeps between runs: its user, key and simulation."""

    user: str
    api_key: str
    simulation_id: int | None = None

    def to_json(self) -> str:
        return json.dumps(
            {"user": self.user, "api_key": self.api_key, "simulation_id": self.simulation_id},
            indent=2,
        ) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DemoCredentials | None:
        """Parse the file's content; None when it is not what ``to_json`` writes."""
        try:
            raw = json.loads(text)
        except ValueError:
            return None
        if not isinstance(raw, dict):
            return None
        user, key, sim = raw.get("user"), raw.get("api_key"), raw.get("simulation_id")
        if not isinstance(user, str) or not isinstance(key, str) or not user or not key:
            return None
        if not (sim is None or (isinstance(sim, int) and not isinstance(sim, bool) and sim > 0)):
            sim = None
        return cls(user, key, sim)


def simulation_data(speed: float) -> dict[str, Any]:
    """The ``data`` of the demo simulation for a speed factor (1 = real time)."""
    return {"simulator": {**DEMO_SIMULATOR, "speed": speed}, "performance_tracker_enabled": True}


@dataclass(frozen=True, slots=True)
class Instructions:
    """The lines ``ridecast demo`` prints; every command is one shell-quoted line."""

    dashboard_url: str
    curl: str
    export: str
    listen: str
    websocket_url: str


def launcher_command(argv0: str | None = None) -> str:
    """How a plain shell in the current folder runs this ``ridecast``: the bare name when
    ``ridecast`` on PATH is this very launcher, else its path (relative when it is below the
    current folder, e.g. ``.venv/bin/ridecast`` from ``scripts/demo``)."""
    launcher = Path(argv0 if argv0 is not None else sys.argv[0])
    if launcher.name != "ridecast" or not launcher.exists():
        return "ridecast"
    on_path = shutil.which("ridecast")
    if on_path is not None and Path(on_path).resolve() == launcher.resolve():
        return "ridecast"
    absolute = launcher.absolute()
    try:
        relative = absolute.relative_to(Path.cwd())
        return shlex.quote(str(relative) if "/" in str(relative) else f"./{relative}")
    except ValueError:
        return shlex.quote(str(absolute))


def instructions(base_url: str, user: str, api_key: str, simulation_id: int,
                 token: str, launcher: str = "ridecast") -> Instructions:
    """The dashboard link and the commands a new user pastes, for one server and user."""
    ws_base = "ws" + base_url.removeprefix("http")
    # No key in the link: the page asks for it once and trades it for a session token.
    fragment = f"user={quote(user, safe='')}&sim={simulation_id}"
    curl = " ".join(
        ["curl", "-u", shlex.quote(f"{user}:{api_key}"),
         shlex.quote(f"{base_url}/api/v2/user/token/")]
    )
    export = " ".join([
        "export",
        shlex.quote(f"RIDECAST_URL={base_url}"),
        shlex.quote(f"RIDECAST_USER={user}"),
        shlex.quote(f"RIDECAST_API_KEY={api_key}"),
    ])
    return Instructions(
        dashboard_url=f"{base_url}/#{fragment}",
        curl=curl,
        export=export,
        listen=f"{launcher} listen {simulation_id}",
        websocket_url=f"{ws_base}/simulation_events/{simulation_id}?token={quote(token)}",
    )


def display_host(host: str) -> str:
    """The host to put in printed URLs: a wildcard bind is reached through loopback."""
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


# ---- the credentials file -------------------------------------------------------------


def read_credentials(path: Path) -> DemoCredentials | None:
    try:
        return DemoCredentials.from_json(path.read_text(encoding="utf-8"))
    except OSError:
        return None


def write_credentials(path: Path, creds: DemoCredentials) -> None:
    """Write the file readable by its owner only, replacing it atomically."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(creds.to_json())
    os.chmod(tmp, stat.S_IRUSR | stat.S_IWUSR)  # also when the file existed with wider rights
    os.replace(tmp, path)


# ---- preparing the user, the server and the simulation -----------------------------------


class DemoError(Exception):
    """Raised when the demo cannot start; the message says what to do."""


def embedded_settings(data_dir: Path) -> Settings:
    """The settings of the demo: embedded store and bus in ``data_dir``, whatever the
    environment says about those; other ``RIDECAST_*`` variables still apply."""
    from ..config import get_settings

    os.environ.update({
        "RIDECAST_DATABASE_URL": f"sqlite+aiosqlite:///{data_dir / DATABASE_FILE}",
        "RIDECAST_BUS_URL": "memory://",
        "RIDECAST_WEBHOOK_ALLOW_PRIVATE": "true",
    })
    os.environ.pop("RIDECAST_WS_PORT", None)  # one port serves everything in the demo
    os.environ.setdefault("RIDECAST_LOG_LEVEL", "warning")
    get_settings.cache_clear()
    return get_settings()


async def ensure_user(database_url: str, path: Path) -> DemoCredentials:
    """The demo user with a working API key: the saved one, else a new key (or user)."""
    from ..auth.credentials import BasicCredentials
    from ..store.accounts import AccountStore
    from ..store.driver_connections import close_engine
    from ..store.engine import create_engine, upgrade

    await upgrade(database_url)
    engine = create_engine(database_url)
    try:
        accounts = AccountStore(engine)
        saved = read_credentials(path)
        if saved is not None:
            try:
                await accounts.authenticate(BasicCredentials(saved.user, saved.api_key))
                return saved
            except Unauthorized:
                pass  # revoked or another database: issue a new key below
        if await accounts.get_user(DEMO_USER) is not None:
            key = await accounts.new_key(DEMO_USER)
        else:
            _principal, key = await accounts.create_user(DEMO_USER, DEMO_ORG)
        creds = DemoCredentials(DEMO_USER, key, saved.simulation_id if saved else None)
        write_credentials(path, creds)
        return creds
    finally:
        await close_engine(engine)


def _check(response: httpx.Response, doing: str) -> Any:
    if response.is_success:
        return response.json() if response.content else None
    raise DemoError(f"{doing}: HTTP {response.status_code} {response.text[:300]}")


async def prepare_simulation(base_url: str, creds: DemoCredentials,
                             speed: float) -> tuple[DemoCredentials, str, dict[str, Any]]:
    """Through the public API: reuse or create the demo simulation, set its speed, start or
    resume its simulator, and get a token. Returns the credentials with the simulation id,
    the token and the simulator's status."""
    import httpx

    async with httpx.AsyncClient(base_url=base_url, auth=(creds.user, creds.api_key),
                                 timeout=30) as http:
        record: dict[str, Any] | None = None
        if creds.simulation_id is not None:
            found = await http.get(f"/api/v2/simulation/{creds.simulation_id}")
            if found.status_code == 200:
                record = found.json()
                data = record["data"] if isinstance(record.get("data"), dict) else {}
                simulator = data.get("simulator")
                wanted = {**DEMO_SIMULATOR, **(simulator if isinstance(simulator, dict) else {}),
                          "speed": speed}
                if simulator != wanted:
                    # Keep every other key (a webhook the user set, say): merge, then PATCH
                    # the whole data with If-Match, as the interface asks.
                    patched = await http.patch(
                        f"/api/v2/simulation/{record['id']}",
                        json={"data": {**data, "simulator": wanted}},
                        headers={"If-Match": found.headers.get("etag", "*")},
                    )
                    record = _check(patched, "updating the demo simulation")
        if record is None:
            created = await http.post("/api/v2/simulation", json={
                "name": DEMO_SIMULATION_NAME, "data": simulation_data(speed)})
            record = _check(created, "creating the demo simulation")
        assert record is not None
        sim = int(record["id"])
        control = f"/api/v2/simulation/{sim}/simulator"
        status = _check(await http.get(control), "reading the simulator")
        if status["status"] == "paused":
            status = _check(await http.post(control + "/resume"), "resuming the simulator")
        elif status["status"] != "running":
            status = _check(await http.post(control + "/start"), "starting the simulator")
        token = _check(await http.get("/api/v2/user/token/"), "getting a token")["token"]
    return replace(creds, simulation_id=sim), str(token), status


def print_instructions(console: Console, creds: DemoCredentials, token: str,
                       info: Instructions, data_dir: Path, speed: float,
                       run: str | None = None) -> None:
    """The block a new user reads; commands go on lines of their own, unwrapped. ``run``
    is the run's seed and start (what reproduces it)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold cyan", no_wrap=True)
    grid.add_column(overflow="fold")
    pace = "real time" if speed == 1 else f"{speed:g}x real time"
    grid.add_row("user", creds.user)
    grid.add_row("API key", creds.api_key)
    grid.add_row("token", token)
    grid.add_row("simulation", f"#{creds.simulation_id} · {DEMO_SIMULATOR['vehicles']} vehicles, "
                 f"{DEMO_SIMULATOR['bookings_per_hour']} bookings/h, {pace}")
    if run is not None:
        grid.add_row("run", run)
    grid.add_row("data", str(data_dir))
    console.print(Panel(grid, title="[bold]ridecast demo[/bold] is running",
                        border_style="green", expand=False))

    def heading(text: str) -> None:
        console.print(f"\n[bold]{text}[/bold]")

    def line(text: str) -> None:
        console.print(text, soft_wrap=True, markup=False, highlight=False)

    heading("Dashboard (sign in with the API key above; the link does not carry it):")
    line(info.dashboard_url)
    heading("Get a websocket token:")
    line(info.curl)
    heading("Stream the events in your terminal:")
    line(info.export)
    line(info.listen)
    heading("Or open the stream with any websocket client:")
    line(info.websocket_url)
    console.print(f"\n[dim]API docs: {info.dashboard_url.split('#')[0]}docs · "
                  "Ctrl-C stops the demo; run it again to resume.[/dim]", soft_wrap=True)
    sys.stdout.flush()


async def serve_demo(settings: Settings, host: str, port: int, creds: DemoCredentials,
                     data_dir: Path, speed: float, out: Console, err: Console) -> int:
    """Serve until SIGINT/SIGTERM; set the simulation up once the server listens."""
    from ..app import create_app
    from ..hub import ShutdownFirstServer
    from . import gctuning
    from .serve import uvicorn_config

    # The same server configuration as `ridecast serve`.
    app = create_app(settings)
    server = ShutdownFirstServer(uvicorn_config(app, settings, host, port,
                                               log_level=settings.log_level), app)
    gctuning.tune()

    # uvicorn takes SIGINT/SIGTERM while it serves, then restores these handlers and raises
    # the signal it caught into them again: asking for a stop (a no-op by then) rather than
    # dying with the default action lets the demo end with status 0.
    def stop(_sig: int, _frame: FrameType | None) -> None:
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                return 1
            await asyncio.sleep(0.05)
        base_url = f"http://{display_host(host)}:{port}"
        setup = asyncio.create_task(prepare_simulation(base_url, creds, speed))
        await asyncio.wait({serving, setup}, return_when=asyncio.FIRST_COMPLETED)
        if not setup.done():
            setup.cancel()
        elif setup.exception() is not None:
            err.print(f"[red]error:[/red] {setup.exception()}")
            server.should_exit = True
            await serving
            return 1
        else:
            creds, token, status = setup.result()
            write_credentials(data_dir / CREDENTIALS_FILE, creds)
            assert creds.simulation_id is not None
            info = instructions(base_url, creds.user, creds.api_key, creds.simulation_id, token,
                                launcher_command())
            print_instructions(out, creds, token, info, data_dir, speed, run_identity(status))
        await serving
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def run_demo(host: str, port: int, data_dir: Path, speed: float) -> int:
    """Set up and serve the demo until stopped; the process's exit status."""
    out = Console(**styling())
    err = Console(stderr=True, **styling())
    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not port_free(host, port):
        err.print(f"[red]error:[/red] {host}:{port} is in use; pick another with --port")
        return 1
    settings = embedded_settings(data_dir)
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .startlog import quiet_pool

    quiet_pool(settings.log_level)
    try:
        creds = asyncio.run(ensure_user(settings.database_url, data_dir / CREDENTIALS_FILE))
        code = asyncio.run(serve_demo(settings, host, port, creds, data_dir, speed, out, err))
    except (RidecastError, DemoError) as exc:
        err.print(f"[red]error:[/red] {getattr(exc, 'message', exc)}")
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the server took over the signals
        return 130
    err.print(f"ridecast demo stopped; its data stays in {data_dir}")
    return code


def demo(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = 8000,
    data_dir: Annotated[
        Path, typer.Option(help="Folder of the demo's database and credentials.")
    ] = Path("./ridecast-data"),  # the same folder as datadir.DEFAULT_DATA_DIR
    speed: Annotated[
        float, typer.Option(help="Simulated seconds per second (1 = real time).", min=0.01,
                            max=1000.0)
    ] = 1.0,
) -> None:
    """Run a live demo: a simulated fleet in real time, its event streams and the dashboard."""
    raise typer.Exit(run_demo(host, port, data_dir, speed))
