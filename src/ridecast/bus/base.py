"""The bus: how stored events and simulation changes reach every consumer process.

A bus carries two kinds of message, in the order they were published:

* ``StoredEvent``: an event that is in the log, with its cursor and the bytes of its
  websocket frame, serialised once;
* ``SimulationChanged``: a simulation was updated or deleted, so caches of its owner and
  webhook settings must be refreshed and, when deleted, its streams closed;
* ``SimulatorCommand`` and ``SimulatorReply``: a simulator command forwarded to the node that
  owns the run, and that node's answer (see ``simulator/hosting/cluster_host.py``). Their fields are
  plain values so that any bus can carry them.

Handlers are called synchronously, in publication order, and must not block: the hub only
enqueues frames, the webhook dispatcher only wakes up. That keeps the publishing path free
of any wait on a consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)


def make_frame(body: bytes, event_id: int) -> bytes:
    """The websocket frame: the envelope JSON with ``event_id`` appended as a string."""
    return b'%s,"event_id":"%d"}' % (body[:-1], event_id)


@dataclass(slots=True)
class StoredEvent:
    """An appended event as consumers see it.

    ``body`` is the envelope's JSON (the webhook body); ``frame`` is the same JSON with
    ``event_id`` added (the websocket frame), built once, when first read: most events of
    a busy log reach no stream, so building every frame at append would be wasted work.
    Pass ``_frame`` only when it is at hand already.
    One instance goes to every consumer, which only reads it; it is not frozen only because
    a frozen dataclass costs several times more to build, once per ingested event.
    """

    event_id: int
    simulation_id: int
    org_id: int
    owner_id: int
    message_type: str
    body: bytes
    _frame: bytes | None = field(default=None, compare=False, repr=False)
    has_webhook: bool = False

    @property
    def frame(self) -> bytes:
        """``body`` with ``event_id`` added: the websocket frame."""
        frame = self._frame
        if frame is None:
            frame = self._frame = make_frame(self.body, self.event_id)
        return frame


@dataclass(frozen=True, slots=True)
class SimulationChanged:
    """A simulation was created, updated or deleted."""

    simulation_id: int
    org_id: int
    owner_id: int
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class SimulatorCommand:
    """A simulator command for the node ``node_id`` that owns the run of ``simulation_id``.

    ``command`` is a ``simulator.commands.Command`` name; ``args_json`` its arguments (JSON).
    """

    request_id: str
    node_id: str
    simulation_id: int
    command: str
    args_json: str


@dataclass(frozen=True, slots=True)
class SimulatorReply:
    """The owner's answer to ``SimulatorCommand`` ``request_id``.

    ``body_json`` is the JSON response body: the result when ``ok``, else the error body
    (``{"error": {"code", "message", "details"}}``) with its HTTP ``status_code``.
    """

    request_id: str
    ok: bool
    status_code: int
    body_json: str


BusMessage = StoredEvent | SimulationChanged | SimulatorCommand | SimulatorReply
Handler = Callable[[Sequence[BusMessage]], None]
Unsubscribe = Callable[[], None]


class Handlers:
    """The handlers subscribed to one bus, shared by every implementation."""

    def __init__(self) -> None:
        self._handlers: list[Handler] = []

    def subscribe(self, handler: Handler) -> Unsubscribe:
        self._handlers.append(handler)

        def unsubscribe() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)

        return unsubscribe

    def clear(self) -> None:
        self._handlers.clear()

    def hand_out(self, messages: Sequence[BusMessage]) -> None:
        """Call every handler with ``messages``; one broken consumer never stops the others."""
        if not messages:
            return
        for handler in tuple(self._handlers):
            try:
                handler(messages)
            except Exception:
                log.exception("bus handler %r failed", handler)


class LogReader(Protocol):
    """What a distributed bus reads from the event log to fill gaps (``EventLog`` has it)."""

    async def newest_id(self) -> int:
        """The newest committed event id (0 when none)."""

    async def read_range(self, after: int, upto: int) -> Sequence[StoredEvent]:
        """Every event with ``after < event_id <= upto``, in order."""


class Bus(Protocol):
    """Fan-out of bus messages to every subscriber in every process."""

    def attach_log(self, reader: LogReader) -> None:
        """Give the bus the event log, to fill gaps from (before ``start``)."""

    async def start(self) -> None:
        """Connect; after this, ``publish`` and delivery to handlers work."""

    async def close(self) -> None:
        """Stop delivering and release connections."""

    async def publish(self, messages: Sequence[BusMessage]) -> None:
        """Send ``messages``, in order, to every subscriber (this process's included)."""

    def subscribe(self, handler: Handler) -> Unsubscribe:
        """Call ``handler`` with each batch of messages; returns a function that stops it."""
