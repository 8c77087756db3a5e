"""Step transactions (``txsteps``) run on asyncpg's own connection, beside SQLAlchemy.

Why: a statement through SQLAlchemy's ``execute`` costs the server's one event loop about
three times the CPU of the same statement sent with asyncpg's ``fetch`` (an execution
context, a result, a greenlet switch per driver call), and a webhook claim is half a
dozen statements. The steps are plain SQL with ``:name`` binds (``Query``) or ``?``
placeholders (``Many``); here they are numbered ``$1 ...`` once per text (cached) and
sent to the connection SQLAlchemy's pool checked out, so the pool still owns it.

The SETs a transaction opens with (the worker's settings, ``store.outbox``) travel with its
``BEGIN``: ``BEGIN; SET ...; SET ...`` is one round trip in the simple-query protocol,
where a SET returns no rows. It ends with ``COMMIT``; on any error the connection
is invalidated (closed and replaced by the pool), so no half-done transaction, nor a
connection in an unknown state after a cancellation, goes back to the pool. A driver error
that means the store is down becomes ``ServiceUnavailable``, as it would through the engine
(``outage.driver_error``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from . import outage
from .steps import Many, Query, Steps

T = TypeVar("T")

# SQLAlchemy's own rule for a ``:name`` bind in ``text()`` (never a ``::`` cast).
_BIND = re.compile(r"(?<![:\w\\]):(\w+)(?![:\w])")


@lru_cache(maxsize=512)
def numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with its ``:name`` binds as ``$1 ...`` (a name used twice is one number),
    and the names in number order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _BIND.sub(number, sql), tuple(names)


@lru_cache(maxsize=256)
def dollared(sql: str) -> str:
    """``sql``, written with ``?`` placeholders (and no other ``?``), with ``$1 ...``."""
    pieces = sql.split("?")
    return "".join(f"{piece}${n}" for n, piece in enumerate(pieces[:-1], 1)) + pieces[-1]


def _args(sql: str, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    text, names = numbered(sql)
    return text, [params[name] for name in names]


def _opens_with(step: Any) -> bool:
    """Whether ``step`` can travel with the BEGIN: a SET with no binds (no rows back)."""
    return (isinstance(step, Query) and not step.params
            and step.sql.lstrip()[:4].upper() == "SET ")


async def _drive(driver: Any, steps: Steps[T], *, transaction: bool) -> T:
    sent: Any = None
    begun = not transaction
    settings: list[str] = []  # leading SETs, sent with the BEGIN
    while True:
        try:
            step = steps.send(sent)
        except StopIteration as stop:
            if transaction and (begun or settings):
                await driver.execute(";".join(["BEGIN", *settings, "COMMIT"]) if not begun
                                     else "COMMIT")
            return stop.value  # type: ignore[no-any-return]
        if not begun:
            if _opens_with(step):
                settings.append(step.sql)
                sent = []
                continue
            begun = True
            await driver.execute(";".join(["BEGIN", *settings]))
        if isinstance(step, Many):
            if step.rows:
                await driver.executemany(dollared(step.sql), step.rows)
            sent = None
            continue
        text, args = _args(step.sql, step.params)
        sent = [tuple(row) for row in await driver.fetch(text, *args)]


async def run_asyncpg(conn: AsyncConnection, steps: Steps[T], *, transaction: bool = True) -> T:
    """Run ``steps`` on ``conn``'s asyncpg connection: as one transaction, or (``transaction``
    False, reads) each statement on its own."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    try:
        return await _drive(driver, steps, transaction=transaction)
    except BaseException as exc:
        dead = driver is None or driver.is_closed()
        await conn.invalidate()
        translated = outage.driver_error(conn, exc, disconnect=dead) \
            if isinstance(exc, Exception) else exc
        if translated is exc:
            raise
        raise translated from exc
    finally:
        steps.close()


__all__ = ["dollared", "numbered", "run_asyncpg"]
