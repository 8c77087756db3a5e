"""The ``ridecast`` command: one Typer app, one module per command group (``lazy.COMMANDS``)."""

from __future__ import annotations

import sys
from importlib.metadata import version
from typing import Annotated, Any

import typer

from ..config_errors import settings_error_line
from .lazy import LazyGroup
from .suggest import option_suggestion

app = typer.Typer(
    name="ridecast",
    help="Real-time event delivery for ridesharing simulations: websocket streams and webhooks.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_show_locals=False,
    # Every command's module is imported when that command runs (cli/lazy.py): the server
    # and the SDK are seconds of imports that --version and --help do not need.
    cls=LazyGroup,
)


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"ridecast {version('ridecast')}")
        raise typer.Exit()


@app.callback()
def root(
    _version: Annotated[bool, typer.Option(
        "--version", callback=show_version, is_eager=True, help="Print the version and exit.",
    )] = False,
) -> None:
    """Real-time event delivery for ridesharing simulations: websocket streams and webhooks."""


def command_options(ctx: Any) -> list[str]:
    """Every option name of the command of a Click context (``--help`` included)."""
    if ctx is None:
        return []
    return [name for param in ctx.command.get_params(ctx)
            if getattr(param, "param_type_name", "") == "option"
            for name in (*param.opts, *param.secondary_opts)]


def usage_error_line(exc: typer.TyperException) -> str | None:
    """One line for a usage error (unknown command or option, missing argument...), with
    Typer's "Did you mean" when it has one; None when there is nothing left to say (the help
    that a bare group prints has already been shown)."""
    ctx = getattr(exc, "ctx", None)
    option_name = getattr(exc, "option_name", None)  # a NoSuchOption (Typer's own Click)
    if isinstance(option_name, str) and hasattr(exc, "possibilities"):
        message = f"No such option: {option_name}" + option_suggestion(
            option_name, command_options(ctx))
    else:
        format_message = getattr(exc, "format_message", None)
        message = " ".join(str(format_message() if format_message else exc).split())
    if not message:
        return None
    where = getattr(ctx, "command_path", "") or "ridecast"
    return f"{where}: {message} (see: {where} --help)"


def main() -> None:
    """Run the CLI; usage errors are one line on stderr (exit status 2), never a box."""
    try:
        result = app(standalone_mode=False)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(1)
    except typer.TyperException as exc:
        line = usage_error_line(exc)
        if line:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(int(getattr(exc, "exit_code", 2)))
    except Exception as exc:
        # A bad RIDECAST_* value: one line naming it, not a traceback (config_errors.py).
        line = settings_error_line(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
