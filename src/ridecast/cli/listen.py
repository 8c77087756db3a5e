"""``ridecast listen [SIM] [TYPE] [--since ID]``: follow a stream in the terminal.

One coloured summary line per event (``--json``: the raw frames, one per line, for scripts).
Drops reconnect with back-off and resume from the last event_id, so nothing is missed; the
connection status goes to stderr so stdout stays clean.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

# The SDK is imported where it is used, so ``listen --help`` needs none of it.
if TYPE_CHECKING:
    from ..client import AsyncClient, StreamStatus
from .remote import (
    DEFAULT,
    ENV_URL,
    JsonOption,
    KeyOption,
    UrlOption,
    UserOption,
    err,
    fail,
    out,
    reporting_errors,
)
from .suggest import unknown_types

# One colour per type; related types share a hue so a busy feed stays readable.
COLOURS: dict[str, str] = {
    "bookings": "bright_green", "bookings_cancellation": "red", "fail_to_board": "bright_red",
    "offers": "cyan", "offer_accepted": "bright_cyan", "offer_rejected": "magenta",
    "no_offer": "bright_magenta", "calc_started": "grey62", "scheduler_result": "grey70",
    "assignment": "bold yellow", "vehicle_arrival": "blue", "vehicle_arrival_grouped": "blue",
    "node_status": "green", "vehicle_state_changed": "bright_blue", "vehicle_states": "grey50",
    "gps_data": "dim", "vehicle_use": "orange3", "demand_modification": "yellow",
}


def parse_target(args: list[str]) -> tuple[int | None, list[str]]:
    """SIM and TYPE in either order (as the paths allow); TYPE may be a comma list."""
    from ..client.protocol import split_types

    simulation_id: int | None = None
    types: list[str] = []
    for arg in args:
        if arg.isdigit():
            if simulation_id is not None:
                raise ValueError(f"two simulation ids given: {simulation_id} and {arg}")
            simulation_id = int(arg)
        else:
            types.extend(split_types([arg]))
    message = unknown_types(types)
    if message:
        raise ValueError(message)
    return simulation_id, types


def _ids(values: Any) -> str:
    items = values if isinstance(values, list) else []
    shown = ",".join(str(v) for v in items[:5])
    return shown + (f",… ({len(items)})" if len(items) > 5 else "")


def _num(value: Any) -> str:
    return f"{value:.5f}" if isinstance(value, float) else str(value)


SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "bookings": lambda d: f"{len(d.get('bookings', []))} booking(s) "
                          f"{_ids([b.get('id') for b in d.get('bookings', [])])}",
    "bookings_cancellation": lambda d: f"cancelled booking(s) {_ids(d.get('booking_ids'))}",
    "fail_to_board": lambda d: f"no-show for booking(s) {_ids(d.get('booking_ids'))}",
    "offers": lambda d: f"{len(d.get('offers', []))} offer(s) {_ids(d.get('offer_ids'))}",
    "offer_accepted": lambda d: f"offer {d.get('offer_id')} accepted",
    "offer_rejected": lambda d: f"offer {d.get('offer_id')} rejected",
    "no_offer": lambda d: f"no offer for booking(s) {_ids(d.get('booking_ids'))}",
    "calc_started": lambda d: f"calculating booking(s) {_ids(d.get('booking_ids'))}",
    "scheduler_result": lambda d: f"vehicle {d.get('vehicle_id')}: "
                                  f"{len(d.get('nodes', []))} node(s)",
    "assignment": lambda d: f"vehicle {d.get('vehicle_id')}: {len(d.get('nodes', []))} node(s), "
                            f"{len(d.get('edges', []))} edge(s)",
    "vehicle_arrival": lambda d: f"vehicle {d.get('vehicle_id')} → {d.get('node_type')} "
                                 f"node {d.get('node_id')} at {d.get('estimated_scheduled_ts')}",
    "vehicle_arrival_grouped": lambda d: f"vehicle {d.get('vehicle_id')}: "
                                         f"{len(d.get('arrivals', []))} arrival(s)",
    "node_status": lambda d: f"vehicle {d.get('vehicle_id')} {d.get('node_type')} "
                             f"{d.get('status')}",
    "vehicle_state_changed": lambda d: f"vehicle {d.get('vehicle_id')} changed",
    "vehicle_states": lambda d: f"{len(d.get('vehicle_states', []))} vehicle state(s)",
    "gps_data": lambda d: f"vehicle {d.get('vehicle_id')} at {_num(d.get('lat'))},"
                          f"{_num(d.get('lon'))} speed {d.get('speed')}",
    "vehicle_use": lambda d: f"vehicle {d.get('vehicle_id')} {d.get('action')}",
    "demand_modification": lambda d: f"vehicle {d.get('vehicle_id')} node {d.get('node_id')}: "
                                     f"{len(d.get('tickets', []))} ticket(s)",
}


def summarise(body: dict[str, Any]) -> str:
    """The one-line summary of a frame (never raises, whatever the payload holds)."""
    data = body.get("data")
    summary = SUMMARIES.get(str(body.get("message_type")))
    if summary is not None and isinstance(data, dict):
        try:
            return summary(data)
        except (AttributeError, TypeError, ValueError):
            pass
    return str(data)[:120]


def event_line(body: dict[str, Any]) -> str:
    """The rich markup of one event's line: id, time, simulation, type, summary."""
    message_type = str(body.get("message_type"))
    colour = COLOURS.get(message_type, "white")
    stamp = str(body.get("current_sim_ts", ""))[11:19]
    return (f"[dim]#{body.get('event_id')} {stamp}[/dim] sim {body.get('simulation_id')} "
            f"[{colour}]{message_type:<23}[/{colour}] {summarise(body)}".replace("[]", ""))


def show_status(status: StreamStatus) -> None:
    since = f" since {status.since}" if status.since else ""
    if status.kind == "connected":
        err.print(f"[green]connected[/green] {status.url_path}{since}")
    elif status.kind == "closed":
        what = f"close {status.close_code}" if status.close_code else "dropped"
        err.print(f"[yellow]{what}[/yellow] {status.reason}".rstrip())
    elif status.kind == "waiting":
        err.print(f"[yellow]reconnecting in {status.delay:.1f} s[/yellow] "
                  f"(retry {status.attempt}){since}")


async def follow(client: AsyncClient, simulation_id: int | None, types: list[str],
                 since: str | None, as_json: bool, count: int | None, quiet: bool) -> int:
    """Print events until ``count`` have arrived (forever without it); returns how many."""
    from ..client.protocol import read_frame

    stream = client.stream(simulation_id, types or None, since,
                           on_status=None if quiet else show_status)
    seen = 0
    if count is not None and count <= 0:
        return 0
    async with stream:
        async for frame in stream.frames():
            if as_json:
                print(frame.raw, flush=True)
            else:
                out.print(event_line(read_frame(frame.raw).body))
            seen += 1
            if count is not None and seen >= count:
                break
    return seen


async def preflight(client: AsyncClient, url: str, simulation_id: int | None) -> None:
    """Fail at once, in one line, when there is no server at ``url``, the credentials are
    refused, or the simulation is missing or invisible: the stream itself would only retry
    (or say "connected" to a path that never delivers)."""
    from ..client.errors import NotFoundError, TransportError

    try:
        if simulation_id is None:
            await client.list_simulations(limit=1)
        else:
            await client.get_simulation(simulation_id)
    except TransportError as exc:
        raise fail(f"no ridecast server answers at {url} ({exc}); start one (ridecast serve) "
                   f"or point --url / ${ENV_URL} at it") from None
    except NotFoundError as exc:
        raise fail(f"simulation {simulation_id} does not exist at {url} or is not visible to "
                   f"this user ({exc.code}); see yours with: ridecast simulations list") from None


def listen(
    target: Annotated[list[str] | None, typer.Argument(
        help="[SIM] [TYPE]: a simulation id and/or event type(s), comma-separated; "
             "none for every visible simulation and type.", show_default=False)] = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="Replay from after this event_id, then go live.")] = None,
    count: Annotated[int | None, typer.Option(
        "--count", "-n", help="Exit after this many events.")] = None,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No connection status on stderr.")] = False,
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stream events live: one coloured line per event (raw frames with --json).

    Reconnects with back-off on drops and resumes from the last event_id. Examples:
    `ridecast listen`, `ridecast listen 3`, `ridecast listen 3 gps_data`,
    `ridecast listen assignment,bookings --json`.
    """
    try:
        simulation_id, types = parse_target(target or [])
    except ValueError as exc:
        raise fail(str(exc)) from None

    from ..client import AsyncClient

    async def run() -> int:
        async with AsyncClient(url, user=user, key=key) as client:
            await preflight(client, url, simulation_id)
            return await follow(client, simulation_id, types, since, as_json, count, quiet)

    try:
        with reporting_errors(url):
            asyncio.run(run())
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
