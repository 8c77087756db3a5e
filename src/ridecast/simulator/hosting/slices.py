"""Which request an engine process serves next: urgent ones first, then fair turns.

An engine process hosts several engines and serves one request at a time. Requests that a
person or a clock waits for are *urgent*: a real-time run's step, an operation, KPIs,
creating or dropping an engine; they are served first, in arrival order, so a ``speed: 1``
run keeps to the wall clock however many runs go as fast as they can beside it. The steps
of runs at ``speed: "max"`` are served in turns: one step per group (an organisation) per
round, and within a group one per run. Each step is a bounded slice of CPU time (see
``engine_process.py``), so every group gets the same share of the process whatever its runs
cost per simulated second. Pure: no I/O here.

>>> q = SliceQueue()
>>> q.push(Request(1, "advance", 7, {}, urgent=False, group="a"))
>>> q.push(Request(2, "kpis", 8, {}, urgent=True, group="b"))
>>> [q.pop().req_id, q.pop().req_id]
[2, 1]
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any


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
    """Urgent requests in order, then the others round-robin by group (see the module)."""

    def __init__(self) -> None:
        self._urgent: deque[Request] = deque()
        # group -> its waiting requests; a group served moves to the end (its turn is over).
        self._groups: OrderedDict[str, deque[Request]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._urgent) + sum(len(q) for q in self._groups.values())

    def push(self, request: Request) -> None:
        if request.urgent:
            self._urgent.append(request)
            return
        self._groups.setdefault(request.group, deque()).append(request)

    def pop(self) -> Request:
        """The next request to serve; ``IndexError`` when none waits."""
        if self._urgent:
            return self._urgent.popleft()
        for group, waiting in self._groups.items():
            request = waiting.popleft()
            if waiting:
                self._groups.move_to_end(group)
            else:
                del self._groups[group]
            return request
        raise IndexError("no request waits")
