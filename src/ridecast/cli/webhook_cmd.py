"""``ridecast webhook set|show|clear|test|deliveries``: a simulation's webhook.

``set`` and ``clear`` do the interface's safe read-merge-PATCH with ``If-Match`` (retried on
412), so the other keys of the simulation's ``data`` survive.
"""

from __future__ import annotations

import base64
import secrets
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:  # the SDK is for the commands to import, not for their --help
    from ..client import Client, Simulation
from .lazy import QuietGroup
from .output import print_table
from .remote import (
    DEFAULT,
    JsonOption,
    KeyOption,
    ServerOption,
    UrlOption,
    UserOption,
    call,
    err,
    fail,
    out,
    print_json,
)
from .suggest import unknown_types

app = typer.Typer(help="A simulation's webhook: settings, test, delivery log and replay.",
                  no_args_is_help=True,
                  cls=QuietGroup)

SimArgument = Annotated[int, typer.Argument(help="Simulation id.")]

# While a replay is in flight, deliveries are in one of these states.
IN_FLIGHT = ("pending", "delivering")


def settings_dict(sim: Simulation) -> dict[str, Any]:
    """The webhook settings as --json prints them (the secret itself is never printed)."""
    return {
        "simulation_id": sim.id,
        "url": sim.webhook_url,
        "message_types": sim.webhook_types,
        "signed": sim.webhook_signed,
        "disabled_at": sim.webhook_disabled_at,
        "disabled_reason": sim.raw.get("messaging_webhook_disabled_reason"),
        "etag": sim.etag,
    }


def print_settings(sim: Simulation) -> None:
    if not sim.webhook_url:
        out.print(f"simulation {sim.id}: no webhook")
        return
    out.print(f"simulation {sim.id} → [bold]{sim.webhook_url}[/bold]")
    out.print(f"  types:  {', '.join(sim.webhook_types) or '(none: nothing is sent)'}")
    out.print(f"  signed: {'yes (webhook-signature)' if sim.webhook_signed else 'no'}")
    if sim.webhook_disabled_at:
        out.print(f"  [red]disabled at {sim.webhook_disabled_at}: "
                  f"{sim.raw.get('messaging_webhook_disabled_reason')}[/red] "
                  "(the next `webhook set` enables it again)")


def new_secret() -> str:
    """A fresh Standard Webhooks secret: ``whsec_`` + base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


@app.command("set")
def set_webhook(
    simulation_id: SimArgument,
    target: Annotated[str, typer.Option("--url", "--target", help="Receiver URL.")],
    types: Annotated[list[str], typer.Option(
        "--types", "-t", help="Event types to send, comma-separated or repeated.")],
    secret: Annotated[str | None, typer.Option(
        "--secret", help="Sign deliveries with this whsec_ secret.")] = None,
    generate_secret: Annotated[bool, typer.Option(
        "--generate-secret", help="Make a new secret, print it once, and sign with it.")] = False,
    url: ServerOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send TYPES events of a simulation to a URL (read-merge-PATCH: other data keys stay).

    The server's address is --server / $RIDECAST_URL here, since --url names the receiver.
    """
    from ..client.protocol import split_types

    if secret and generate_secret:
        raise fail("--secret and --generate-secret exclude each other")
    chosen = new_secret() if generate_secret else secret
    wanted = split_types(types)
    problem = unknown_types(wanted)
    if problem:
        raise fail(problem)
    sim = call(url, user, key,
               lambda client: client.set_webhook(simulation_id, target, wanted, chosen))
    if as_json:
        print_json({**settings_dict(sim), **({"secret": chosen} if generate_secret else {})})
        return
    print_settings(sim)
    if generate_secret:
        err.print("the signing secret follows (store it now, it is not shown again):")
        print(chosen)


@app.command("show")
def show(
    simulation_id: SimArgument,
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a simulation's webhook URL, types, signing and disabled state."""
    sim = call(url, user, key, lambda client: client.get_simulation(simulation_id))
    if as_json:
        print_json(settings_dict(sim))
    else:
        print_settings(sim)


@app.command("clear")
def clear(
    simulation_id: SimArgument,
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove the webhook (URL, types, secret); other data keys stay."""
    sim = call(url, user, key, lambda client: client.clear_webhook(simulation_id))
    if as_json:
        print_json(settings_dict(sim))
    else:
        out.print(f"simulation {sim.id}: webhook removed")


@app.command("test")
def test(
    simulation_id: SimArgument,
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send a test event to the webhook now and show the receiver's answer."""
    outcome = call(url, user, key, lambda client: client.webhook_test(simulation_id))
    if as_json:
        print_json(outcome)
    else:
        ok = isinstance(outcome, dict) and outcome.get("ok")
        colour = "green" if ok else "red"
        status = outcome.get("status_code") if isinstance(outcome, dict) else None
        error = outcome.get("error") if isinstance(outcome, dict) else None
        latency = outcome.get("latency_ms") if isinstance(outcome, dict) else None
        out.print(f"[{colour}]{'delivered' if ok else 'failed'}[/{colour}] "
                  f"status {status} in {latency} ms" + (f": {error}" if error else ""))
    if not (isinstance(outcome, dict) and outcome.get("ok")):
        raise typer.Exit(1)


def remaining(client: Client, simulation_id: int) -> int:
    """Deliveries of the simulation still queued or being sent."""
    total = 0
    for status in IN_FLIGHT:
        page = client.webhook_deliveries(simulation_id, status=status, limit=1)
        total += int(page.get("meta", {}).get("total_count", 0))
    return total


def replay(client: Client, simulation_id: int, wait_s: float) -> dict[str, Any]:
    """Queue every failed delivery again and follow them with a progress bar."""
    retried = int(client.retry_failed(simulation_id).get("retried", 0))
    left = retried
    deadline = time.monotonic() + wait_s
    with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=False) as progress:
        task = progress.add_task("replay", total=retried)
        while retried and time.monotonic() < deadline:
            left = min(retried, remaining(client, simulation_id))
            progress.update(task, completed=retried - left)
            if left == 0:
                break
            time.sleep(0.25)
    failed = client.webhook_deliveries(simulation_id, status="failed", limit=1)
    return {"retried": retried, "in_flight": left,
            "failed": int(failed.get("meta", {}).get("total_count", 0))}


@app.command("deliveries")
def deliveries(
    simulation_id: SimArgument,
    status: Annotated[str | None, typer.Option(
        help="pending, delivering, succeeded, failed or disabled.")] = None,
    message_type: Annotated[str | None, typer.Option("--type", help="Only this type.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 20,
    retry: Annotated[int | None, typer.Option(
        "--retry", help="Queue this delivery again.")] = None,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="Replay every failed delivery, with a progress bar.")] = False,
    wait: Annotated[float, typer.Option(
        help="With --retry-failed: follow the replay for at most this many seconds.")] = 120.0,
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """The delivery log: each delivery's status and attempts; --retry/--retry-failed replay."""
    problem = unknown_types([message_type]) if message_type else None
    if problem:
        raise fail(problem)
    if retry is not None:
        result = call(url, user, key, lambda c: c.retry_delivery(simulation_id, retry))
        if as_json:
            print_json(result)
        else:
            out.print(f"delivery {retry} queued again")
        return
    if retry_failed:
        summary = call(url, user, key, lambda c: replay(c, simulation_id, wait))
        if as_json:
            print_json(summary)
        else:
            out.print(f"replayed {summary['retried']} deliveries: {summary['failed']} failed, "
                      f"{summary['in_flight']} still in flight")
        return
    page = call(url, user, key, lambda c: c.webhook_deliveries(
        simulation_id, status=status, message_type=message_type, limit=limit))
    if as_json:
        print_json(page)
        return
    table = Table("id", "event", "type", "status", "attempts", "last", "error")
    for row in page.get("objects", []):
        attempts = row.get("attempts") or []
        last = attempts[-1] if attempts else {}
        colour = {"succeeded": "green", "failed": "red", "disabled": "red"}.get(
            row.get("status"), "yellow")
        table.add_row(
            str(row.get("id")), str(row.get("event_id")), str(row.get("message_type")),
            f"[{colour}]{row.get('status')}[/{colour}]", str(row.get("attempt_count")),
            f"{last.get('status_code') or last.get('error_class') or ''}",
            str(row.get("last_error") or "")[:60],
        )
    print_table(out, table)
    meta = page.get("meta", {})
    # Past a simulation's newest 10,000 deliveries, a count of succeeded or all of them is
    # a lower bound (meta.total_count_exact).
    more = "" if meta.get("total_count_exact", True) else "+"
    # On stderr: a pipe gets the rows only (docs/client.md).
    err.print(f"[dim]{len(page.get('objects', []))} of {meta.get('total_count')}{more}[/dim]")
