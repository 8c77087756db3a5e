"""One way for tests to wait: on a condition, with a deadline and a message that says what
was awaited and what was last seen, never on a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(condition: Callable[[], bool], *, timeout: float = 20.0, step: float = 0.05,
               what: str = "condition", why: Callable[[], str] | None = None) -> None:
    """Return as soon as ``condition()`` is true; fail after ``timeout`` s naming ``what`` and,
    if given, the state ``why()`` describes."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout} s"
                                 + (f": {why()}" if why is not None else ""))
        time.sleep(step)

