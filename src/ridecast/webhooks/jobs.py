"""The work a claim hands out and what comes back from it: ``Job``, ``Unit``, ``Result``.

Plain data, shared by the claim (``claimer``), the record (``recorder``) and the dispatcher.
Not frozen: these are made once or more per delivery, and a frozen dataclass's
``__init__`` costs several times a plain one's; nothing mutates them once made, but for the
dispatcher marking a ``Result`` with its job's ordering as it queues it.

Every ``Job`` and ``Result`` carries the claim token its row was leased under: the recorder
writes a result only where that token still holds the row (docs/webhooks.md, "Who may write
a delivery").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A Result with this status gives the delivery back unsent (no attempt was made).
RELEASE = "release"


@dataclass(slots=True)
class Job:
    """A claimed delivery, with the event body to send."""

    delivery_id: int
    event_id: int
    simulation_id: int
    message_type: str
    url: str
    attempt_count: int
    body: bytes | None  # None when retention removed the event (cannot be sent)
    ordered: bool = True
    token: str = ""

    @property
    def msg_id(self) -> str:
        """The ``webhook-id``: one per event, the same on every retry (receivers dedupe)."""
        return f"msg_{self.event_id}"


@dataclass(slots=True)
class Result:
    """The new state of a delivery after an attempt (``attempt`` None: none was made)."""

    delivery_id: int
    status: str
    attempt_count: int
    next_attempt_at: float
    last_error: str | None
    # A failed attempt, for webhook_attempts; a success's travels in ``success``.
    attempt: dict[str, Any] | None = None
    simulation_id: int | None = None  # set on a success: clears the endpoint's failing clock
    # A success's attempt as the delivery row keeps it: started_at, latency_ms, status_code,
    # response_body.
    success: tuple[float, float, int | None, str | None] | None = None
    token: str = ""  # the claim it was sent under
    # Sent in an ordered unit, whose rows but the last are written under its lane lease
    # (``recorder``); set by the dispatcher when the result is queued.
    ordered: bool = False


@dataclass(slots=True)
class Unit:
    """Deliveries claimed together, sent one after the other (see ``claims``)."""

    token: str
    lease_until: float
    jobs: list[Job]


__all__ = ["RELEASE", "Job", "Result", "Unit"]
