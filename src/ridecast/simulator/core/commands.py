"""Simulator commands as data: a name and JSON arguments, so that they can cross the bus.

A REST route builds a ``Command``; the node that owns the run applies it. Control commands
(start, pause, resume, stop) are the host's; operation commands map one to one onto the
engine's operation methods (``simulator/core/operations.py``), with keyword arguments. Pure: no
I/O here.

>>> cmd = Command("accept_offer", {"offer_id": 7})
>>> Command.from_json(cmd.name, cmd.args_json()) == cmd
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...errors import BadRequest
from .engine import Engine
from .operations import Result

CONTROLS = frozenset({"start", "pause", "resume", "stop"})
"""Commands that change the run's status; ``start`` carries ``{"data": <simulation data>}``."""

OPERATIONS = frozenset({
    "create_booking", "cancel_booking", "accept_offer", "reject_offer",
    "set_vehicle_enabled", "push_position", "node_status",
})
"""Commands that are engine operations, named after the ``Operations`` method they call."""


@dataclass(frozen=True)
class Command:
    """One simulator command: ``name`` (a control or an operation) and its arguments."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in CONTROLS | OPERATIONS:
            raise BadRequest(f"unknown simulator command {self.name!r}")

    @property
    def is_control(self) -> bool:
        return self.name in CONTROLS

    def args_json(self) -> str:
        return json.dumps(self.args, separators=(",", ":"))

    @classmethod
    def from_json(cls, name: str, args_json: str) -> Command:
        args = json.loads(args_json)
        if not isinstance(args, dict):
            raise BadRequest("simulator command arguments must be a JSON object")
        return cls(name, args)


def apply(engine: Engine, command: Command) -> Result:
    """Run operation ``command`` on ``engine``: its answer, with ``published`` (the message
    types of the events it caused, in order), and those events."""
    if command.name not in OPERATIONS:
        raise ValueError(f"{command.name!r} is not an engine operation")
    body, events = getattr(engine, command.name)(**command.args)
    return {**body, "published": [e["message_type"] for e in events]}, events
