"""The ``ridecast`` command: one Typer app, one module per command group."""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

import typer

from . import (
    config_cmd,
    demo,
    listen,
    network_cmd,
    receiver,
    schema_cmd,
    serve,
    simulations_cmd,
    token_cmd,
    users,
    webhook_cmd,
    worker,
)

app = typer.Typer(
    name="ridecast",
    help="Real-time event delivery for ridesharing simulations: websocket streams and webhooks.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_show_locals=False,
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


app.command("serve")(serve.serve)
app.command("demo")(demo.demo)
app.command("receiver")(receiver.receiver)
app.command("worker")(worker.worker)
app.command("migrate")(serve.migrate)
app.command("schema")(schema_cmd.schema)
app.add_typer(users.app, name="users")
app.add_typer(config_cmd.app, name="config")
app.command("token")(token_cmd.token)
app.add_typer(simulations_cmd.app, name="simulations")
app.command("listen")(listen.listen)
app.add_typer(webhook_cmd.app, name="webhook")
app.add_typer(network_cmd.app, name="network")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
