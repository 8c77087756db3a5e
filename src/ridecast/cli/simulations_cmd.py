"""``ridecast simulations list|create|show``: simulations on a running server."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from ..client import Simulation
from .remote import (
    DEFAULT,
    JsonOption,
    KeyOption,
    UrlOption,
    UserOption,
    call,
    fail,
    out,
    print_json,
)

app = typer.Typer(help="Simulations on a running server.", no_args_is_help=True)


def simulation_dict(sim: Simulation) -> dict[str, Any]:
    """A simulation as the commands print it in --json: the API object plus its ETag."""
    return {**sim.raw, "etag": sim.etag}


def webhook_cell(sim: Simulation) -> str:
    if not sim.webhook_url:
        return ""
    state = " [red](disabled)[/red]" if sim.webhook_disabled_at else ""
    return f"{sim.webhook_url}{state}"


@app.command("list")
def list_simulations(
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 100,
) -> None:
    """List the simulations visible to you."""
    sims = call(url, user, key, lambda client: client.list_simulations(limit=limit))
    if as_json:
        print_json([simulation_dict(s) for s in sims])
        return
    table = Table("id", "name", "webhook", "types")
    for sim in sims:
        table.add_row(str(sim.id), sim.name, webhook_cell(sim), ",".join(sim.webhook_types))
    out.print(table)


def parse_data(text: str | None) -> dict[str, Any] | None:
    """``--data`` as a JSON object (or @file holding one)."""
    if text is None:
        return None
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as handle:
            text = handle.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"--data is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise fail("--data must be a JSON object")
    return value


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="A name for the simulation.")],
    data: Annotated[str | None, typer.Option(
        "--data", help="The data object as JSON, or @file.json.")] = None,
    template: Annotated[int | None, typer.Option(
        "--template", help="Start from this template's data.")] = None,
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a simulation; prints its id (the whole object with --json)."""
    body = parse_data(data)
    sim = call(url, user, key,
               lambda client: client.create_simulation(name, body, template_id=template))
    if as_json:
        print_json(simulation_dict(sim))
    else:
        print(sim.id)


@app.command("show")
def show(
    simulation_id: Annotated[int, typer.Argument(help="Simulation id.")],
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one simulation: its data, webhook settings and ETag."""
    sim = call(url, user, key, lambda client: client.get_simulation(simulation_id))
    if as_json:
        print_json(simulation_dict(sim))
        return
    out.print(f"[bold]simulation {sim.id}[/bold] {sim.name}  [dim]ETag {sim.etag}[/dim]")
    if sim.webhook_url:
        signed = "signed" if sim.webhook_signed else "unsigned"
        out.print(f"webhook: {webhook_cell(sim)} ({signed}) types: {', '.join(sim.webhook_types)}")
    out.print_json(data=sim.data)
