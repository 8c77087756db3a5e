"""The ``ridecast`` command: one Typer app, one module per command group."""

from __future__ import annotations

import typer

from . import config_cmd, schema_cmd, serve, users

app = typer.Typer(
    name="ridecast",
    help="Real-time event delivery for ridesharing simulations: websocket streams and webhooks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
app.command("serve")(serve.serve)
app.command("schema")(schema_cmd.schema)
app.add_typer(users.app, name="users")
app.add_typer(config_cmd.app, name="config")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
