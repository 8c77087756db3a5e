"""Piped CLI output is one line per record, never wrapped, without colour (issue 35 item 4).

Each test runs the real command as a user does, its stdout a pipe (``| wc -l``, ``| cat``),
with no COLUMNS or colour settings in the environment: rich would otherwise wrap at 80.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx

from ridecast.config import Settings
from ridecast.events.examples import example_event
from tests.conftest import Server, User

TIMEOUT_S = 60
ESC = "\x1b"


def _env(server: Server | None = None, user: User | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RIDECAST_") and k not in ("COLUMNS", "FORCE_COLOR", "NO_COLOR")}
    if server is not None and user is not None:
        env.update({"RIDECAST_URL": server.base_url, "RIDECAST_USER": user.name,
                    "RIDECAST_API_KEY": user.key})
    return env


def _piped(args: str, pipe: str, env: dict[str, str], cwd: Path) -> str:
    """``ridecast ARGS | PIPE`` run by a shell; what the pipe printed."""
    ridecast = f"{shlex.quote(sys.executable)} -m ridecast.cli.main"
    done = subprocess.run(f"{ridecast} {args} | {pipe}", shell=True, env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _assert_plain(lines: list[str]) -> None:
    assert all(ESC not in line for line in lines), "colour codes in piped output"


def test_listen_piped_to_wc_counts_one_line_per_event(server: Server, tmp_path: Path) -> None:
    """`ridecast listen SIM gps_data --count 10 | wc -l` prints 10 (it printed 20)."""
    user = server.create_user()
    sim = server.create_simulation(user)
    events = [example_event("gps_data", sim) for _ in range(10)]
    with server.client(user) as http:
        assert http.post(f"/api/v2/simulation/{sim}/events", json=events).status_code == 201
    args = f"listen {sim} gps_data --count 10 --since 0 --quiet"
    assert _piped(args, "wc -l", _env(server, user), tmp_path).strip() == "10"
    lines = _piped(args, "cat", _env(server, user), tmp_path).splitlines()
    assert len(lines) == 10
    assert all(len(line) > 80 and "gps_data" in line for line in lines), lines
    _assert_plain(lines)


def test_config_show_piped_is_one_line_per_setting(tmp_path: Path) -> None:
    """`ridecast config show | cat`: one tab-separated line per setting, whole descriptions."""
    lines = _piped("config show", "cat", _env(), tmp_path).splitlines()
    assert len(lines) == len(Settings.model_fields)
    _assert_plain(lines)
    for line, (name, field) in zip(lines, Settings.model_fields.items(), strict=True):
        variable, _value, source, description = line.split("\t")
        assert variable == f"RIDECAST_{name.upper()}"
        assert source == "default"
        assert description == (field.description or "")
    assert max(len(line) for line in lines) > 80  # the long ones are whole, not cut


def test_simulations_list_and_history_piped_are_one_line_per_record(
    server: Server, tmp_path: Path,
) -> None:
    """Tables and summaries sent to a pipe count records: no header, borders or wraps."""
    user = server.create_user()
    sims = [server.create_simulation(user, name=f"a rather long simulation name {n} " * 3)
            for n in range(3)]
    with httpx.Client(base_url=server.base_url, auth=user.auth) as http:
        posted = http.post(f"/api/v2/simulation/{sims[0]}/events",
                           json=[example_event("gps_data", sims[0]) for _ in range(4)])
        assert posted.status_code == 201, posted.text
    env = _env(server, user)
    listed = _piped("simulations list", "cat", env, tmp_path).splitlines()
    assert sorted(int(line.split("\t")[0]) for line in listed) == sorted(sims), listed
    assert all(line.split("\t")[1].startswith("a rather long") for line in listed)
    _assert_plain(listed)
    history = _piped(f"events history {sims[0]}", "cat", env, tmp_path).splitlines()
    assert len(history) == 4, history
    _assert_plain(history)


def test_webhook_deliveries_piped_prints_rows_only(server: Server, tmp_path: Path) -> None:
    """`ridecast webhook deliveries SIM --limit 3 | cat`: three rows on stdout; the count
    ("3 of 5") on stderr, where a pipe does not take it (issue 53)."""
    user = server.create_user()
    sim = server.create_simulation(user, data={
        "messaging_webhook_url": "http://127.0.0.1:9/hook",
        "messaging_webhook_message_types": ["gps_data"]})
    with server.client(user) as http:
        events = [example_event("gps_data", sim) for _ in range(5)]
        assert http.post(f"/api/v2/simulation/{sim}/events", json=events).status_code == 201
    ridecast = f"{shlex.quote(sys.executable)} -m ridecast.cli.main"
    done = subprocess.run(f"{ridecast} webhook deliveries {sim} --limit 3 | cat", shell=True,
                          env=_env(server, user), cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all("gps_data" in line for line in lines), lines
    assert "3 of 5" in done.stderr


def test_no_color_leaves_no_escape_even_when_colour_is_forced(
    server: Server, tmp_path: Path,
) -> None:
    """NO_COLOR=1 means no escape sequence at all: listen's dim event ids included, also
    where FORCE_COLOR (a terminal, as far as rich knows) would style them (issue 53)."""
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        events = [example_event("gps_data", sim) for _ in range(2)]
        assert http.post(f"/api/v2/simulation/{sim}/events", json=events).status_code == 201
    args = f"listen {sim} --count 2 --since 0"
    forced = {**_env(server, user), "FORCE_COLOR": "1"}
    assert ESC in _piped(args, "cat", forced, tmp_path)  # the test can see escapes
    lines = _piped(args, "cat", {**forced, "NO_COLOR": "1"}, tmp_path).splitlines()
    assert len(lines) == 2
    _assert_plain(lines)


def test_a_url_without_scheme_or_with_the_api_prefix_gets_a_hint(tmp_path: Path) -> None:
    """`--url 127.0.0.1:8000` and `--url http://host/api/v2` say what to give instead of
    "no server answers" or "no such endpoint" (issue 53)."""
    ridecast = [sys.executable, "-m", "ridecast.cli.main"]
    for url, hint in (("127.0.0.1:8000", "did you mean http://127.0.0.1:8000"),
                      ("http://127.0.0.1:8000/api/v2/", "base URL (http://127.0.0.1:8000)")):
        for command in (["simulations", "list"], ["listen", "1"]):
            done = subprocess.run([*ridecast, *command, "--url", url, "--key", "k"],
                                  env=_env(), cwd=tmp_path, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, check=False)
            assert done.returncode == 1
            assert hint in done.stderr and done.stderr.count("\n") == 1, done.stderr
