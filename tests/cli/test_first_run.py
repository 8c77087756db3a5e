"""First run: --version, one default store, busy ports in one line, the printed launcher."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ridecast.cli.demo import launcher_command
from ridecast.cli.serve import ready_line
from tests.conftest import Server

TIMEOUT_S = 60


def plain_env() -> dict[str, str]:
    """The environment of a new user: no RIDECAST_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RIDECAST_")}


def ridecast(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ridecast.cli.main", *args], cwd=cwd,
                          env=plain_env(), capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def assert_one_line_error(done: subprocess.CompletedProcess[str], *names: str) -> None:
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for name in names:
        assert name in lines[0]


def test_version(tmp_path: Path) -> None:
    done = ridecast("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("ridecast ")


def test_serve_on_a_busy_port_is_one_line_and_migrates_nothing(
        tmp_path: Path, busy_port: int) -> None:
    done = ridecast("serve", "--port", str(busy_port), cwd=tmp_path)
    assert_one_line_error(done, f"127.0.0.1:{busy_port}", "--port")
    assert not (tmp_path / "ridecast-data").exists()


def test_receiver_on_a_busy_port_is_one_line(tmp_path: Path, busy_port: int) -> None:
    done = ridecast("receiver", "--port", str(busy_port), cwd=tmp_path)
    assert_one_line_error(done, f"127.0.0.1:{busy_port}", "--port")


def test_users_use_the_default_data_directory_of_serve_and_demo(tmp_path: Path) -> None:
    done = ridecast("users", "create", "ada", "--org", "acme", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = tmp_path / "ridecast-data"
    assert (data / "ridecast.db").is_file()
    assert str(data) in done.stderr  # printed at start
    listed = ridecast("users", "list", "--json", cwd=tmp_path)
    assert '"ada"' in listed.stdout


def test_launcher_is_a_runnable_path_when_not_on_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = tmp_path / ".venv" / "bin" / "ridecast"
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert launcher_command(str(launcher)) == ".venv/bin/ridecast"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert launcher_command(str(launcher)) == str(launcher)
    monkeypatch.setenv("PATH", str(launcher.parent))
    launcher.chmod(0o755)
    assert launcher_command(str(launcher)) == "ridecast"


def test_ready_line_names_the_urls() -> None:
    line = ready_line("http://127.0.0.1:8000", None, "http")
    assert "http://127.0.0.1:8000/docs" in line
    assert "ws://127.0.0.1:8000/simulation_events/ID" in line
    assert "ws://127.0.0.1:9001/" in ready_line("http://127.0.0.1:8000", 9001, "http")


def listen_env(base_url: str, user: str, key: str) -> dict[str, str]:
    return {**plain_env(), "RIDECAST_URL": base_url, "RIDECAST_USER": user,
            "RIDECAST_API_KEY": key}


def run_listen(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ridecast.cli.main", "listen", *args],
                          env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def test_listen_with_no_server_names_the_address_at_once(busy_port: int) -> None:
    # A port that is bound and listening but never answers HTTP is not it: use a closed one.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = int(sock.getsockname()[1])
    url = f"http://127.0.0.1:{closed}"
    done = run_listen(listen_env(url, "ada", "nokey"), "1")
    assert_one_line_error(done, url, "--url")


def test_listen_to_a_missing_or_invisible_simulation_says_so(server: Server) -> None:
    owner = server.create_user()
    stranger = server.create_user()
    sim = server.create_simulation(owner)
    for user, target in ((owner, "999999"), (stranger, str(sim))):
        done = run_listen(listen_env(server.base_url, user.name, user.key), target)
        assert_one_line_error(done, f"simulation {target}", server.base_url)
        assert "connected" not in done.stderr


def test_listen_with_bad_credentials_is_one_line(server: Server) -> None:
    done = run_listen(listen_env(server.base_url, "nobody", "wrong"), "1")
    assert done.returncode == 2
    assert_one_line_error(done, "--user/--key")
