"""``ridecast simulations list|create|show|status|start|pause|resume|stop|delete``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

if TYPE_CHECKING:  # the SDK is for the commands to import, not for their --help
    from ..client import Simulation
from .lazy import QuietGroup
from .output import print_table
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

app = typer.Typer(help="Simulations on a running server.", no_args_is_help=True,
                  cls=QuietGroup)


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
    print_table(out, table)


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


# The KPIs that `status` shows, in this order, with what each one counts (docs/simulator.md).
KPI_LABELS: dict[str, str] = {
    "bookings": "booking requests",
    "offered": "offers made",
    "accepted": "offers accepted by riders",
    "offers_rejected": "offers rejected by riders",
    "offers_expired": "offers left to expire by riders",
    "no_offer": "requests refused by the system (no_offer)",
    "rejected_rate": "share of requests refused by the system",
    "served": "riders dropped off",
    "on_board": "riders on board now",
    "no_shows": "no-shows",
    "cancellations": "cancellations",
    "wait_mean_s": "wait for pickup, mean (s)",
    "wait_p95_s": "wait for pickup, p95 (s)",
    "ride_over_direct_mean": "ride time / direct time, mean",
    "vehicle_km": "vehicle km",
    "empty_km": "empty km",
    "passenger_km": "passenger km",
    "occupancy": "occupancy (passenger-km per vehicle-km)",
    "vehicles": "vehicles",
    "vehicles_enabled": "vehicles enabled",
    "events": "events emitted by the simulator",
}

SimId = Annotated[int, typer.Argument(help="Simulation id.", show_default=False)]


def run_identity(status: dict[str, Any]) -> str | None:
    """``seed N · start TS``: what reproduces the run (docs/simulator.md), or None before
    the first start. The start is the run's own (``started_sim_ts``), set or not."""
    settings = status.get("settings")
    started = status.get("started_sim_ts")
    if not isinstance(settings, dict) or not started:
        return None
    return f"seed {settings.get('seed')} · start {started}"


def print_status(simulation_id: int, status: dict[str, Any]) -> None:
    state = str(status.get("status"))
    colour = {"running": "green", "paused": "yellow", "finished": "blue"}.get(state, "red")
    clock = f" at {status['sim_ts']}" if status.get("sim_ts") else ""
    out.print(f"simulation {simulation_id}: simulator [{colour}]{state}[/{colour}]{clock}")
    run = run_identity(status)
    if run is not None:
        out.print(f"run: {run} (set data.simulator.start_ts to this start to run it again)",
                  markup=False, highlight=False)
    if status.get("error"):
        out.print(f"[red]error: {status['error']}[/red]")
    kpis = status.get("kpis") or {}
    if not kpis:
        return
    table = Table("KPI", "value", "counts")
    for name, label in KPI_LABELS.items():
        if name in kpis:
            value = kpis[name]
            table.add_row(name, "" if value is None else str(value), label)
    print_table(out, table)


@app.command("status")
def status(
    simulation_id: SimId,
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """The built-in simulator's state, simulated clock and KPIs (GET .../simulator)."""
    state = call(url, user, key, lambda client: client.simulator(simulation_id))
    if as_json:
        print_json(state)
    else:
        print_status(simulation_id, state)


def _control(action: str, simulation_id: int, url: str, user: str | None, key: str | None,
             as_json: bool) -> None:
    state = call(url, user, key, lambda client: client.simulator_action(simulation_id, action))
    if as_json:
        print_json(state)
    else:
        out.print(f"simulation {simulation_id}: simulator {state.get('status')}")


@app.command("start")
def start(simulation_id: SimId, url: UrlOption = DEFAULT, user: UserOption = None,
          key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Start the simulator with the simulation's data.simulator settings (a new run)."""
    _control("start", simulation_id, url, user, key, as_json)


@app.command("pause")
def pause(simulation_id: SimId, url: UrlOption = DEFAULT, user: UserOption = None,
          key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Freeze the simulated clock (operations still apply)."""
    _control("pause", simulation_id, url, user, key, as_json)


@app.command("resume")
def resume(simulation_id: SimId, url: UrlOption = DEFAULT, user: UserOption = None,
           key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Continue a paused simulator."""
    _control("resume", simulation_id, url, user, key, as_json)


@app.command("stop")
def stop(simulation_id: SimId, url: UrlOption = DEFAULT, user: UserOption = None,
         key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Stop the simulator for good (start begins a new run)."""
    _control("stop", simulation_id, url, user, key, as_json)


@app.command("delete")
def delete(simulation_id: SimId, url: UrlOption = DEFAULT, user: UserOption = None,
           key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Delete a simulation: its streams close and it produces no more events."""
    call(url, user, key, lambda client: client.delete_simulation(simulation_id))
    if as_json:
        print_json({"id": simulation_id, "deleted": True})
    else:
        out.print(f"simulation {simulation_id} deleted")
