"""The ``ridecast`` command: one Typer app, one module per command group."""

from __future__ import annotations

import typer

from . import (
    config_cmd,
    demo,
    listen,
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
    add_completion=False,
    pretty_exceptions_show_locals=False,
)
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
