"""What a node says about a link it depends on (Redis, the database): a line when the link
breaks, a line when it comes back, and between the two at most one summary every
``summary_interval_s``.

While Redis or the database is down, every publish, every background loop and every
request that needs it fails, tens of times a second under load; logging each with its
traceback buried everything else in the log (thousands of lines a minute). Here the
failures are counted instead, and the summary says how many and what the last one was.
Pure: the bus (``bus/redis.py``) and the engine (``store/outage.py``) call it with the time
and log the line it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Connectivity:
    """Up/down state of one link, and the lines that report it (``None``: log nothing).

    ``name`` begins each line (``"Redis bus"``); ``consequence`` ends the line saying the
    link broke (what still works, what does not); ``summary_interval_s`` is the least time
    between two lines while the link stays down (``RIDECAST_OUTAGE_LOG_INTERVAL_S``).
    """

    name: str
    summary_interval_s: float
    consequence: str = "retrying"
    up: bool = True
    down_since: float = 0.0
    failures: int = 0  # since the last line
    total_failures: int = 0  # since the link went down
    last_error: str = ""
    _last_line: float = field(default=0.0, repr=False)

    def failed(self, what: str, error: BaseException | str, now: float) -> str | None:
        """Count one failure of ``what`` (``"publish"``, ``"read"``); the line to log, if any."""
        self.last_error = f"{what}: {_describe(error)}"
        self.failures += 1
        self.total_failures += 1
        if self.up:
            self.up = False
            self.down_since = self._last_line = now
            self.failures = 0
            return f"{self.name} unreachable ({self.last_error}); {self.consequence}"
        if now - self._last_line < self.summary_interval_s:
            return None
        line = (f"{self.name} still unreachable after {now - self.down_since:.0f} s: "
                f"{self.failures} more failures since the last report "
                f"(last {self.last_error})")
        self.failures = 0
        self._last_line = now
        return line

    def succeeded(self, now: float) -> str | None:
        """Record that the link answered; the line to log when it was down."""
        if self.up:
            return None
        self.up = True
        line = (f"{self.name} reachable again after {now - self.down_since:.1f} s "
                f"({self.total_failures} failed operations meanwhile)")
        self.failures = self.total_failures = 0
        return line


def _describe(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
