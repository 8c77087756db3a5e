"""A cluster's addresses, and the order in which a client tries them (pure, no I/O).

A client given several base URLs (``AsyncClient(["http://a:8000", "http://b:8000"])``, or
``RIDECAST_URL=http://a:8000,http://b:8000``) sends each request to the node that answered
last. When that node cannot be reached, it tries the next, in turn:

- a REST call moves on when its request never left (connection refused or timed out) and,
  for a GET, on any transport failure, since a GET can be sent twice without harm. A POST
  whose connection broke after it was sent is not retried elsewhere: it may have been
  stored, and sending it again could store it twice.
- a stream that loses its node resumes on the next one at once with ``since=`` (the nodes
  share the event log, so the cursor means the same everywhere); it waits (the back-off)
  only after every node has failed in a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .backoff import Backoff


def split_urls(value: str | Sequence[str]) -> tuple[str, ...]:
    """Base URLs from one string (comma-separated) or a sequence; trailing slashes dropped."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    urls = tuple(part.strip().rstrip("/") for part in parts if part.strip())
    if not urls:
        raise ValueError(f"no base URL in {value!r}")
    return urls


@dataclass
class Nodes:
    """The base URLs of one cluster and which of them answered last."""

    urls: tuple[str, ...]
    current: int = 0

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("a client needs at least one base URL")

    def order(self) -> list[int]:
        """Indexes of ``urls`` to try: the one that answered last first, then the others."""
        count = len(self.urls)
        return [(self.current + step) % count for step in range(count)]

    @property
    def url(self) -> str:
        """The URL to try first."""
        return self.urls[self.current]

    def answered(self, index: int) -> None:
        """``urls[index]`` answered: try it first from now on."""
        self.current = index

    def failed(self, index: int) -> None:
        """``urls[index]`` could not be reached: when it was the first choice, the next one
        becomes first."""
        if index == self.current:
            self.current = (index + 1) % len(self.urls)


def stream_wait(backoff: Backoff, attempt: int, nodes: int, rand: float) -> float:
    """Seconds a stream waits before retry ``attempt`` (0-based, failures in a row) over a
    cluster of ``nodes`` nodes: none while the current round still has a node to try, then
    the back-off of the round (one node: exactly the back-off of ``attempt``)."""
    if nodes > 1 and attempt % nodes != nodes - 1:
        return 0.0
    return backoff.delay(attempt // nodes, rand)
