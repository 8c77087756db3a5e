"""``ridecast demo``: the printed instructions work as pasted, reruns reuse, stops are clean."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.cli.demo import (
    DEMO_SIMULATOR,
    DemoCredentials,
    display_host,
    instructions,
    read_credentials,
    simulation_data,
    write_credentials,
)
from ridecast.events.types import ALL_TYPES
from ridecast.simulator.core.engine import Engine
from ridecast.simulator.core.settings import read_settings
from tests.dashboard.demo_process import launch_demo, ridecast_argv

LISTEN_TIMEOUT_S = 45


def run_printed_curl(curl: str) -> dict[str, object]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    done = subprocess.run([*shlex.split(curl), "--silent", "--show-error", "--max-time", "10"],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_new_user_follows_the_printed_instructions(tmp_path: Path) -> None:
    """The printed curl gives a token; the printed export + listen receives live events."""
    demo = launch_demo(tmp_path / "data")
    try:
        printed = demo.wait_ready()
        token = run_printed_curl(printed.curl)
        assert list(token) == ["token"] and len(str(token["token"])) == 36
        # As pasted, plus --count so that the command ends by itself.
        listen = subprocess.run(
            [*ridecast_argv(printed.listen), "--count", "3", "--json", "--quiet"],
            env={**os.environ, **printed.export_env()}, capture_output=True, text=True,
            timeout=LISTEN_TIMEOUT_S,
        )
        assert listen.returncode == 0, listen.stderr
        frames = [json.loads(line) for line in listen.stdout.splitlines() if line.strip()]
        assert len(frames) == 3
        sim = int(printed.listen.split()[-1])
        assert {frame["simulation_id"] for frame in frames} == {sim}
        assert all("event_id" in frame for frame in frames)
        creds_file = demo.data_dir / "demo-credentials.json"
        assert stat.S_IMODE(creds_file.stat().st_mode) == 0o600
    finally:
        code = demo.stop(signal.SIGTERM)
    assert code == 0, demo.stderr()
    assert "stopped" in demo.stderr()


def test_second_run_reuses_user_key_and_simulation(tmp_path: Path) -> None:
    """Running the demo again on the same folder prints the same key and simulation."""
    data = tmp_path / "data"
    first = launch_demo(data)
    try:
        before = first.wait_ready()
    finally:
        assert first.stop(signal.SIGINT) == 0, first.stderr()
    second = launch_demo(data)
    try:
        after = second.wait_ready()
        assert after.curl.replace(str(second.port), "P") == before.curl.replace(
            str(first.port), "P")
        assert after.listen == before.listen
        assert run_printed_curl(after.curl)["token"]
    finally:
        assert second.stop(signal.SIGINT) == 0, second.stderr()


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    """A taken port ends the demo at once with status 1 and says which port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "ridecast.cli.main", "demo", "--port", str(port),
             "--data-dir", str(tmp_path / "d")],
            capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 1
    assert f"{port} is in use" in done.stderr


# ---- the pure parts ------------------------------------------------------------------

names = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30)


@given(user=names.filter(lambda u: ":" not in u), key=names, sim=st.integers(1, 10**9),
       port=st.integers(1, 65535))
def test_printed_commands_survive_the_shell(user: str, key: str, sim: int, port: int) -> None:
    """Whatever the user name and key, each printed line splits back into what was meant."""
    base = f"http://127.0.0.1:{port}"
    info = instructions(base, user, key, sim, "00000000-0000-4000-8000-000000000000")
    assert shlex.split(info.curl) == ["curl", "-u", f"{user}:{key}", f"{base}/api/v2/user/token/"]
    words = shlex.split(info.export)
    assert words == ["export", f"RIDECAST_URL={base}", f"RIDECAST_USER={user}",
                     f"RIDECAST_API_KEY={key}"]
    assert shlex.split(info.listen) == ["ridecast", "listen", str(sim)]
    fragment = parse_qs(urlsplit(info.dashboard_url).fragment)
    assert fragment == {"user": [user], "sim": [str(sim)]}  # never the key
    assert info.websocket_url.startswith(f"ws://127.0.0.1:{port}/simulation_events/{sim}?token=")


@given(st.text(max_size=200))
def test_credentials_file_parser_never_raises(text: str) -> None:
    """A damaged credentials file reads as absent, never as an exception."""
    parsed = DemoCredentials.from_json(text)
    assert parsed is None or isinstance(parsed, DemoCredentials)


def test_credentials_round_trip_with_owner_only_mode(tmp_path: Path) -> None:
    """Saved credentials read back the same, and the file ends up 0600 even if it was wider."""
    path = tmp_path / "demo-credentials.json"
    path.write_text("{}")
    path.chmod(0o644)
    creds = DemoCredentials("demo", "rck_abc", 7)
    write_credentials(path, creds)
    assert read_credentials(path) == creds
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_credentials(tmp_path / "missing.json") is None


def test_demo_simulation_runs_in_real_time_with_a_fleet() -> None:
    """The demo simulation is real time by default, with a fleet and steady demand."""
    data = simulation_data(1.0)
    assert data["simulator"]["speed"] == 1.0
    assert data["simulator"]["vehicles"] == DEMO_SIMULATOR["vehicles"] >= 10
    assert data["simulator"]["bookings_per_hour"] > 0


def test_demo_shows_every_event_type_within_its_first_hour() -> None:
    """The demo's settings make all 18 types happen in the first hour, and a vehicle move
    within seconds (so a new user sees the whole interface, and at once)."""
    engine = Engine(1, read_settings(simulation_data(1.0)), datetime(2026, 1, 1, tzinfo=UTC))
    first_gps = next(
        t for t in range(1, 61) if any(e["message_type"] == "gps_data" for e in engine.advance(t))
    )
    assert first_gps <= 10
    seen = {event["message_type"] for event in engine.advance(3600.0)}
    assert ALL_TYPES - seen <= {"vehicle_states"}  # that one came at t=0, in the first slice


def test_wildcard_hosts_print_as_loopback() -> None:
    """A demo bound to every interface prints URLs that work from this machine."""
    assert display_host("0.0.0.0") == "127.0.0.1"
    assert display_host("127.0.0.1") == "127.0.0.1"
    assert display_host("::1") == "[::1]"
