"""``ridecast --version``, ``--help`` and every command's ``--help`` start without importing
the server (issue 53): each runs as a process, and what it imported is read from
``python -X importtime``, never from a clock."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ridecast.cli import remote
from ridecast.cli.lazy import COMMANDS, load
from ridecast.client import models

SERVER = ("ridecast.app", "ridecast.api", "ridecast.hub", "ridecast.store", "ridecast.webhooks",
          "ridecast.simulator", "uvicorn", "fastapi", "starlette", "sqlalchemy")
"""The server's packages and the libraries only the server needs."""

SDK_AND_MODELS = ("ridecast.client", "ridecast.events", "ridecast.config", "pydantic",
                  "pydantic_core", "pydantic_settings", "httpx", "websockets")
"""The SDK, the event models and the settings: no help, nor --version, needs any of them."""


def imported(*args: str) -> set[str]:
    """Every module ``ridecast ARGS`` imported, as a process of its own (which printed its
    usage line)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ridecast.cli.main", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ridecast" in done.stdout
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    assert "ridecast.cli.lazy" in modules
    return modules


def under(modules: set[str], packages: tuple[str, ...]) -> set[str]:
    return {m for m in modules if m in packages or m.startswith(tuple(p + "." for p in packages))}


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_no_server_no_sdk(args: list[str]) -> None:
    """The root command lists its commands from their one-line help: no module of theirs."""
    modules = imported(*args)
    assert under(modules, SERVER + SDK_AND_MODELS) == set()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_commands_help_imports_no_server_no_sdk(command: str) -> None:
    """``ridecast COMMAND --help`` imports that command's module, never the server, the SDK,
    pydantic or the settings."""
    modules = imported(command, "--help")
    assert under(modules, SERVER + SDK_AND_MODELS) == set()


def subcommands() -> list[tuple[str, str]]:
    """Every (group, subcommand) pair of the CLI."""
    return [(name, sub) for name in sorted(COMMANDS)
            for sub in sorted(getattr(load(name), "commands", {}))]


def test_the_cli_has_subcommands() -> None:
    """The next test covers something: the groups have their subcommands."""
    assert {"events", "simulations", "users", "webhook"} <= {g for g, _ in subcommands()}


@pytest.mark.parametrize(("group", "command"), subcommands())
def test_each_subcommands_help_imports_no_server_no_sdk(group: str, command: str) -> None:
    """``ridecast GROUP COMMAND --help`` too: the group's own options, not given, build no
    pydantic coercion (lazy.DeferredCoercion)."""
    modules = imported(group, command, "--help")
    assert under(modules, SERVER + SDK_AND_MODELS) == set()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_command_list_says_what_each_command_says(command: str) -> None:
    """The one-line help in ``ridecast --help`` is the command's own first line."""
    real = load(command)
    assert (real.help or "").split("\n\n")[0].replace("\n", " ").strip() == \
        COMMANDS[command].help


def test_the_cli_names_the_sdks_settings() -> None:
    """The connection options' environment variables and default URL are the SDK's."""
    assert (remote.DEFAULT_URL, remote.ENV_URL, remote.ENV_USER, remote.ENV_KEY) == (
        models.DEFAULT_URL, models.ENV_URL, models.ENV_USER, models.ENV_KEY)
