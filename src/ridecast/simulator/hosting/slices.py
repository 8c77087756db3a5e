"""Which request an engine process serves next: urgent ones first, then fair turns.

An engine process hosts several engines and serves one request at a time. Requests that a
person or a clock waits for are *urgent*: a real-time run's step, an operation, KPIs,
creating or dropping an engine; they are served first, in arrival order, so a ``speed: 1``
run keeps to the wall clock however many runs go as fast as they can beside it. The steps
of runs at ``speed: "max"`` are served in fair turns by group (an organisation), and within
a group in arrival order (each run has one step waiting at most, so its runs alternate).
Each step is a bounded slice of CPU time (see ``engine_process.py``), charged to its group
once served, so every group gets the same share of the process whatever its runs cost per
simulated second and however many runs it has. Pure: no I/O here.

Fair turns are kept by how much each group was served (``FairTurns``), not by the order in
which groups joined the queue: a run's next step reaches the queue only after its last one
was answered, so a plain round-robin would put an organisation with one run behind every
run of the others each round (a share per run, not per organisation).

>>> q = SliceQueue()
>>> q.push(Request(1, "advance", 7, {}, urgent=False, group="a"))
>>> q.push(Request(2, "kpis", 8, {}, urgent=True, group="b"))
>>> [q.pop().req_id, q.pop().req_id]
[2, 1]
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class FairTurns(Generic[T]):
    """Items waiting by group; ``pop`` gives the head of the group served least so far.

    Each group has a *virtual time*: the cost it was charged (``charge``) while it had
    items waiting. A group that had nothing waiting starts again no earlier than the group
    served last (it banks no credit while idle, and a group that was served but whose next
    item has not come yet keeps its place rather than going behind the others). Ties go to
    the group served least recently.

    >>> turns = FairTurns[str]()
    >>> for name in ("a1", "a2"):
    ...     turns.push("a", name)
    >>> turns.push("b", "b1")
    >>> order = []
    >>> while turns:
    ...     group, item = turns.pop()
    ...     turns.charge(group, 1.0)
    ...     order.append(item)
    >>> order
    ['a1', 'b1', 'a2']
    """

    def __init__(self) -> None:
        self._waiting: dict[str, deque[T]] = {}
        self._vtime: dict[str, float] = {}
        self._served: dict[str, int] = {}
        self._clock = 0.0  # the virtual time of the group served last
        self._seq = itertools.count(1)

    def __len__(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def push(self, group: str, item: T) -> None:
        queue = self._waiting.get(group)
        if queue is None:
            queue = self._waiting[group] = deque()
            self._vtime[group] = max(self._vtime.get(group, 0.0), self._clock)
        queue.append(item)

    def pop(self) -> tuple[str, T]:
        """The next item and its group; ``IndexError`` when none waits."""
        if not self._waiting:
            raise IndexError("nothing waits")
        group = min(self._waiting,
                    key=lambda g: (self._vtime[g], self._served.get(g, 0)))
        queue = self._waiting[group]
        item = queue.popleft()
        if not queue:
            del self._waiting[group]
        self._clock = max(self._clock, self._vtime[group])
        self._served[group] = next(self._seq)
        self._forget_idle()
        return group, item

    def remove(self, group: str, item: T) -> bool:
        """Take ``item`` out of its group's queue (it no longer waits); False if absent."""
        queue = self._waiting.get(group)
        if queue is None or item not in queue:
            return False
        queue.remove(item)
        if not queue:
            del self._waiting[group]
        return True

    def charge(self, group: str, cost: float) -> None:
        """Count ``cost`` (CPU or wall seconds, or a unit) as served to ``group``."""
        self._vtime[group] = self._vtime.get(group, self._clock) + cost

    def _forget_idle(self) -> None:
        """Drop what is kept of groups with nothing waiting that are no longer ahead of the
        clock (they would start from the clock anyway): the state stays bounded by the
        groups active lately, however many come and go."""
        if len(self._vtime) <= 2 * len(self._waiting) + 16:
            return
        for group in [g for g, v in self._vtime.items()
                      if g not in self._waiting and v <= self._clock]:
            del self._vtime[group]
            self._served.pop(group, None)


@dataclass(slots=True)
class Request:
    """One request to an engine process: ``op`` on engine ``key`` with ``args``."""

    req_id: int
    op: str
    key: int
    args: dict[str, Any] = field(default_factory=dict)
    urgent: bool = True
    group: str = ""


class SliceQueue:
    """Urgent requests in order, then the others in fair turns by group (see the module);
    ``served`` charges a request's CPU time to its group."""

    def __init__(self) -> None:
        self._urgent: deque[Request] = deque()
        self._turns: FairTurns[Request] = FairTurns()

    def __len__(self) -> int:
        return len(self._urgent) + len(self._turns)

    def push(self, request: Request) -> None:
        if request.urgent:
            self._urgent.append(request)
            return
        self._turns.push(request.group, request)

    def pop(self) -> Request:
        """The next request to serve; ``IndexError`` when none waits."""
        if self._urgent:
            return self._urgent.popleft()
        return self._turns.pop()[1]

    def served(self, request: Request, cpu_s: float) -> None:
        """``request`` took ``cpu_s`` of CPU: charged to its group when it took a turn."""
        if not request.urgent:
            self._turns.charge(request.group, cpu_s)
