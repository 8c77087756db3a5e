"""Commands imported when they run, not when ``ridecast`` starts.

Each command's module imports what that command needs (the server, the store, the SDK),
which takes seconds on a small machine: ``ridecast --version`` and ``ridecast --help`` need
none of it. ``LazyGroup`` knows every command by name and one-line help (``COMMANDS``) and
imports a command's module only when that command is invoked or its own help is asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

import typer
from typer._click.exceptions import UsageError  # Typer bundles its own Click
from typer.core import TyperGroup


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives: ``module:attribute`` of ``ridecast.cli``, a command function or
    a Typer app of subcommands, and its one-line help for ``ridecast --help``."""

    target: str
    help: str


COMMANDS: dict[str, LazyCommand] = {
    "serve": LazyCommand("serve:serve", "Start the server: HTTP API, websocket streams, "
                         "webhooks (configure with RIDECAST_*)."),
    "demo": LazyCommand("demo:demo", "Run a live demo: a simulated fleet in real time, its "
                        "event streams and the dashboard."),
    "receiver": LazyCommand("receiver:receiver", "Run a local webhook receiver that logs every "
                            "request (method, URL, headers, body)."),
    "worker": LazyCommand("worker:worker", "Run only the webhook dispatcher against "
                          "RIDECAST_DATABASE_URL (no HTTP API)."),
    "simulator": LazyCommand("simulator:simulator", "Run only simulator runs against "
                             "RIDECAST_DATABASE_URL and the Redis bus (no HTTP API)."),
    "migrate": LazyCommand("serve:migrate", "Bring the database of RIDECAST_DATABASE_URL to "
                           "the current schema, then exit."),
    "schema": LazyCommand("schema_cmd:schema", "Print the JSON Schema of the events (or the "
                          "AsyncAPI document)."),
    "users": LazyCommand("users:app", "Users, organisations and API keys."),
    "config": LazyCommand("config_cmd:app", "Configuration (RIDECAST_* environment "
                          "variables)."),
    "token": LazyCommand("token_cmd:token", "Print a fresh websocket token "
                         "(GET /api/v2/user/token/); use it as ?token= on streams."),
    "simulations": LazyCommand("simulations_cmd:app", "Simulations on a running server."),
    "listen": LazyCommand("listen:listen", "Stream events live: one coloured line per event "
                          "(raw frames with --json)."),
    "events": LazyCommand("events_cmd:app", "Publish events to a simulation, and read its "
                          "event log."),
    "webhook": LazyCommand("webhook_cmd:app", "A simulation's webhook: settings, test, "
                           "delivery log and replay."),
    "network": LazyCommand("network_cmd:app", "Road networks for the simulator."),
}


def load(name: str) -> Any:
    """The Click command of ``name``, its module imported now."""
    module_name, _, attribute = COMMANDS[name].target.partition(":")
    module = importlib.import_module(f"{__package__}.{module_name}")
    target = getattr(module, attribute)
    command: Any
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        single = typer.Typer()
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


class DeferredCoercion:
    """Stands for a parameter's coercion until the parameter has a value to coerce.

    Typer builds a parameter's coercion (a pydantic ``TypeAdapter``) the first time it
    processes the parameter, even for an option not given, whose value stays None: a group
    processes its own options (``--help`` included) before its subcommand prints its help, so
    ``ridecast listen --help`` would import pydantic for the root's unset ``--help``.
    """

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # what Typer's coercion answers for an option not given
            return () if param.multiple or param.nargs == -1 else None
        param._runtime_param = None
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)


class QuietGroup(TyperGroup):
    """A group whose options not given import nothing (``DeferredCoercion``): every group of
    the CLI, so that each subcommand's ``--help`` stays light too."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for param in self.get_params(ctx):
            # Only on Typer versions that build a coercion per parameter.
            if getattr(param, "_runtime_param", False) is None:
                setattr(param, "_runtime_param", DeferredCoercion())  # noqa: B010
        result: list[str] = super().parse_args(ctx, args)
        return result


class LazyGroup(QuietGroup):
    """The root group: its commands are ``COMMANDS``, each imported on first use; its own
    help lists them from their one-line help without importing any."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in COMMANDS if n not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in COMMANDS:
            return command
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=COMMANDS[cmd_name].help,
                                           callback=None)
        command = load(cmd_name)
        self.commands[cmd_name] = command
        return command

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:
            # Typer suggests from the commands already loaded: suggest from them all.
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches and "Did you mean" not in exc.message:
                exc.message = (exc.message.rstrip(".") + ". Did you mean "
                               + ", ".join(repr(m) for m in matches) + "?")
            raise

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
