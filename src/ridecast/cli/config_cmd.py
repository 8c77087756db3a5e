"""``ridecast config show``: the effective settings and where each comes from."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer
from rich.table import Table

from .lazy import QuietGroup
from .output import console, print_table

app = typer.Typer(help="Configuration (RIDECAST_* environment variables).", no_args_is_help=True,
                  cls=QuietGroup)


@app.command("show")
def show(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Print every setting with its value, source and description."""
    from ..config import Settings, get_settings

    settings = get_settings()
    values = settings.model_dump(mode="json")
    if as_json:
        typer.echo(json.dumps(values, indent=2))
        return
    table = Table("variable", "value", "source", "description")
    for name, field in Settings.model_fields.items():
        env = f"RIDECAST_{name.upper()}"
        table.add_row(env, json.dumps(values[name]), "env" if env in os.environ else "default",
                      field.description or "")
    print_table(console(), table)
