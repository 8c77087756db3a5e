"""``ridecast events post|history``: publish events to a simulation, and read its log.

``post ID FILE`` (or ``-`` for stdin) sends one envelope or a JSON array of them to
``POST /api/v2/simulation/{id}/events``: all or nothing, as the endpoint does. It prints the
accepted event ids, one a line; a refused batch is one line on stderr naming each bad event's
index and field. ``history ID`` prints the stored events in order (``--json``: one array).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

# The SDK and the event models are imported where they are used, so ``--help`` needs neither.
if TYPE_CHECKING:
    from ..client import Client
    from ..client.errors import APIError
from .lazy import QuietGroup
from .listen import event_line
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
from .suggest import did_you_mean, unknown_types

app = typer.Typer(help="Publish events to a simulation, and read its event log.",
                  no_args_is_help=True,
                  cls=QuietGroup)

SimId = Annotated[int, typer.Argument(help="Simulation id.", show_default=False)]
MAX_SHOWN_ERRORS = 5


def read_events(source: str) -> Any:
    """The JSON document of FILE, or of stdin for ``-``; one-line errors naming the file."""
    name = "stdin" if source == "-" else source
    try:
        if source == "-":
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as handle:
                text = handle.read()
    except OSError as exc:
        raise fail(f"cannot read {name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise fail(f"{name} is not UTF-8 text") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"{name} is not valid JSON: {exc.msg} at line {exc.lineno} column "
                   f"{exc.colno}") from None
    if isinstance(value, list):
        if not value:
            raise fail(f"{name} holds an empty array: nothing to post")
        bad = next((i for i, item in enumerate(value) if not isinstance(item, dict)), None)
        if bad is not None:
            raise fail(f"{name}: event {bad} is not a JSON object")
    elif not isinstance(value, dict):
        raise fail(f"{name} must hold one event (a JSON object) or an array of them")
    return value


def _sent_type(events: Any, index: Any) -> str | None:
    batch = events if isinstance(events, list) else [events]
    if isinstance(index, int) and 0 <= index < len(batch):
        value = batch[index].get("message_type")
        return value if isinstance(value, str) else None
    return None


def describe_refusal(exc: APIError, events: Any) -> str:
    """One line for a refused batch: each error's event index, field and reason."""
    from ..events import ALL_TYPES

    parts: list[str] = []
    for detail in exc.details[:MAX_SHOWN_ERRORS]:
        if not isinstance(detail, dict):
            continue
        index, field = detail.get("index"), detail.get("field")
        where = " ".join(p for p in (
            f"event {index}" if index is not None else "", f"field {field}" if field else ""
        ) if p)
        reason = str(detail.get("message", "")).split(";")[0]
        if detail.get("code") == "unknown_message_type":
            sent = _sent_type(events, index)
            reason += did_you_mean(sent, ALL_TYPES) if sent else ""
        parts.append(f"{where}: {reason}" if where else reason)
    more = len(exc.details) - MAX_SHOWN_ERRORS
    listed = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    head = f"refused ({exc.status} {exc.code}), nothing was stored"
    return f"{head}: {listed}" if listed else f"{head}: {exc.message}"


class _Refused(Exception):
    """A refused batch, carried past ``reporting_errors`` to ``post``'s own message."""

    def __init__(self, error: APIError) -> None:
        super().__init__(error.message)
        self.error = error


def _post(client: Client, simulation_id: int, events: Any) -> list[str]:
    from ..client.errors import APIError

    try:
        return client.post_events(simulation_id, events)
    except APIError as exc:
        if exc.status == 400 and exc.details:
            raise _Refused(exc) from None
        raise


@app.command("post")
def post(
    simulation_id: SimId,
    source: Annotated[str, typer.Argument(
        metavar="FILE|-", help="A JSON file holding one envelope or an array; - for stdin.",
        show_default=False)],
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Publish one event or a batch (all or nothing); prints the accepted event ids.

    A refused batch stores nothing and is one line on stderr naming each bad event's index and
    field; other errors (no server, bad credentials, unknown simulation) are one line too.
    """
    events = read_events(source)
    try:
        ids = call(url, user, key, lambda client: _post(client, simulation_id, events))
    except _Refused as refused:
        raise fail(describe_refusal(refused.error, events)) from None
    if as_json:
        print_json({"event_ids": ids, "count": len(ids)})
    else:
        for event_id in ids:
            print(event_id)


@app.command("history")
def history(
    simulation_id: SimId,
    message_type: Annotated[list[str] | None, typer.Option(
        "--type", "-t", help="Only these event types (comma-separated or repeated).")] = None,
    after: Annotated[str | None, typer.Option(
        "--after", help="Only events after this event_id.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many events.", min=1)] = 100,
    url: UrlOption = DEFAULT, user: UserOption = None, key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """The simulation's stored events in event_id order (one line each; --json: an array)."""
    types = [t.strip() for v in (message_type or []) for t in v.split(",") if t.strip()]
    problem = unknown_types(types)
    if problem:
        raise fail(problem)

    def fetch(client: Client) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for event in client.history(simulation_id, after=after, message_type=types or None,
                                    page_size=min(limit, 500)):
            rows.append(event.model_dump(mode="json", exclude_none=True))
            if len(rows) >= limit:
                break
        return rows

    rows = call(url, user, key, fetch)
    if as_json:
        print_json(rows)
        return
    for row in rows:
        out.print(event_line(row))
