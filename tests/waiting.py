"""One way for tests to wait: on a condition, with a deadline and a message that says what
was awaited and what was last seen, never on a fixed sleep.

``eventually`` polls a plain callable from synchronous code; ``eventually_async`` does the
same from a coroutine, without blocking the event loop, and also accepts a condition that is
itself a coroutine function. Both return the condition's first truthy value, so a test can
wait for a thing and use it in one step."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

Why = Callable[[], object] | str | None


def _message(what: str, timeout: float, why: Why, last: object,
             error: BaseException | None) -> str:
    said = f"{what} not met within {timeout} s"
    if why is not None:
        said += f": {why() if callable(why) else why}"
    elif last is not None and last is not False:
        said += f" (last seen: {last!r})"
    if error is not None:
        said += f" (last error: {error!r})"
    return said


def eventually(condition: Callable[[], T], *, timeout: float = 20.0, step: float = 0.05,
               what: str = "condition", why: Why = None,
               ignoring: tuple[type[BaseException], ...] = ()) -> T:
    """Return the first truthy value of ``condition()``; fail after ``timeout`` s naming
    ``what`` and, if given, the state ``why`` describes. An exception of a type in
    ``ignoring`` counts as "not yet" (a server still starting refuses connections)."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            last = condition()
            error = None
        except ignoring as exc:
            last, error = None, exc
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(_message(what, timeout, why, last, error))
        time.sleep(step)


async def eventually_async(
        condition: Callable[[], T | Awaitable[T]], *, timeout: float = 20.0,  # noqa: ASYNC109
        step: float = 0.05, what: str = "condition", why: Why = None,
        ignoring: tuple[type[BaseException], ...] = ()) -> T:
    """``eventually`` for coroutines: yields to the loop between tries, and awaits the
    condition's result when it is awaitable."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            value = condition()
            last = await value if inspect.isawaitable(value) else value
            error = None
        except ignoring as exc:
            last, error = None, exc
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(_message(what, timeout, why, last, error))
        await asyncio.sleep(step)
