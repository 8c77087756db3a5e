"""Step transactions (``txsteps``) run on asyncpg's own connection, beside SQLAlchemy.

Why: a statement through SQLAlchemy's ``execute`` costs the server's one event loop several
times the CPU of the same statement sent with asyncpg's ``fetch`` (an execution context, a
result, a greenlet switch per driver call), and a webhook claim is half a dozen statements.
The steps are plain SQL with ``:name`` binds (``Query``) or ``?`` placeholders (``Many``);
here they are numbered ``$1 ...`` once per text (cached) and sent to the connection
SQLAlchemy's pool checked out, so the pool still owns it.

The SETs a transaction opens with (the worker's settings, ``store.outbox``) travel with its
``BEGIN``: ``BEGIN; SET ...; SET ...`` is one round trip in the simple-query protocol,
where a SET returns no rows. It ends with ``COMMIT``; on any error the connection
is invalidated (closed and replaced by the pool), so no half-done transaction, nor a
connection in an unknown state after a cancellation, goes back to the pool. A driver error
that means the store is down becomes ``ServiceUnavailable``, as it would through the engine
(``outage.driver_error``).

Inside a transaction every statement is sent as one message burst (Bind, Execute, Sync) of
a statement prepared on that connection *before* its ``BEGIN``. Why: asyncpg prepares a
statement it has not seen with Parse, Describe and Flush, then waits for the answer before
it binds; a process stopped in between (SIGSTOP, a paused VM) leaves its session "active"
and waiting for the client in the middle of a statement, where neither
``idle_in_transaction_session_timeout`` nor ``statement_timeout`` applies, so the row and
advisory locks the transaction already holds stay held until the process resumes
(``tests/webhooks/test_stalls.py``). Prepared ahead, a stopped worker leaves its
session idle in its transaction, and the worker's hold (``store.outbox``) ends it. The
statements prepared ahead are those the process's transactions have run (``PreparedTexts``);
a text met for the first time in the process's life is still prepared inside the
transaction that meets it, once. ``Many`` rows go in chunks of at most
``MANY_CHUNK_BYTES``, each its own burst: asyncpg writes a larger batch in several writes
with a turn of the event loop between them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy.ext.asyncio import AsyncConnection

from . import outage
from .steps import Many, Query, Steps

T = TypeVar("T")
_log = logging.getLogger(__name__)

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


# How many statement texts a process prepares ahead on each connection (the worker's
# transactions use about twenty); the oldest is forgotten past it.
PREPARED_TEXTS = 128
# The most parameter bytes (estimated) of one burst of a ``Many``: asyncpg sends up to 128 KiB
# of an ``executemany`` in one write.
MANY_CHUNK_BYTES = 64 * 1024


class PreparedTexts:
    """The statement texts this process's step transactions run, and each connection's
    statements prepared from them: what a connection lacks is prepared before its
    transaction begins (``ready``)."""

    def __init__(self, limit: int = PREPARED_TEXTS) -> None:
        self._limit = limit
        self._texts: dict[str, None] = {}  # insertion order: the oldest first
        self._version = 0
        self._by_connection: WeakKeyDictionary[Any, tuple[int, dict[str, Any]]] = \
            WeakKeyDictionary()

    async def ready(self, driver: Any) -> dict[str, Any]:
        """``driver``'s prepared statements by text, with every known text prepared (call it
        outside a transaction)."""
        version, statements = self._by_connection.get(driver, (-1, {}))
        if version != self._version:
            version = self._version  # texts another task adds meanwhile: next time
            for sql in list(self._texts):
                if sql not in statements:
                    statements[sql] = await driver.prepare(sql)
            self._trim(statements)
            self._by_connection[driver] = (version, statements)
        return statements

    async def prepared(self, driver: Any, statements: dict[str, Any], sql: str) -> Any:
        """The statement of ``sql`` on ``driver``, prepared now if it is new to it (the
        first time the process meets ``sql``: from then on it is prepared ahead)."""
        statement = statements.get(sql)
        if statement is None:
            statement = statements[sql] = await driver.prepare(sql)
            if sql not in self._texts:
                self._texts[sql] = None
                self._version += 1
                # A statement text that varies with its data (an IN list of n binds) would
                # come back here again and again: this line shows it.
                _log.debug("statement %d prepared ahead from now on: %.120s",
                           len(self._texts), sql)
                self._trim(self._texts)
            self._trim(statements)
        return statement

    def _trim(self, texts: dict[str, Any]) -> None:
        while len(texts) > self._limit:
            del texts[next(iter(texts))]


_PREPARED = PreparedTexts()


def _size(row: Sequence[Any]) -> int:
    return sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row) + 4 * len(row)


def bursts(rows: Sequence[Sequence[Any]], limit: int = MANY_CHUNK_BYTES,
            ) -> Iterator[Sequence[Sequence[Any]]]:
    """``rows`` in runs of at most ``limit`` estimated bytes (one row at least)."""
    start, size = 0, 0
    for n, row in enumerate(rows):
        row_size = _size(row)
        if n > start and size + row_size > limit:
            yield rows[start:n]
            start, size = n, 0
        size += row_size
    if start < len(rows):
        yield rows[start:]


def _opens_with(step: Any) -> bool:
    """Whether ``step`` can travel with the BEGIN: a SET with no binds (no rows back)."""
    return (isinstance(step, Query) and not step.params
            and step.sql.lstrip()[:4].upper() == "SET ")


async def _drive(driver: Any, steps: Steps[T], *, transaction: bool) -> T:
    sent: Any = None
    begun = not transaction
    settings: list[str] = []  # leading SETs, sent with the BEGIN
    statements = await _PREPARED.ready(driver) if transaction else None
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
            if not step.rows:
                pass
            elif statements is None:
                await driver.executemany(dollared(step.sql), step.rows)
            else:
                statement = await _PREPARED.prepared(driver, statements, dollared(step.sql))
                for rows in bursts(step.rows):
                    await statement.executemany(rows)
            sent = None
            continue
        text, args = _args(step.sql, step.params)
        if statements is None:
            rows = await driver.fetch(text, *args)
        else:
            rows = await (await _PREPARED.prepared(driver, statements, text)).fetch(*args)
        sent = [tuple(row) for row in rows]


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


__all__ = ["MANY_CHUNK_BYTES", "PREPARED_TEXTS", "PreparedTexts", "bursts", "dollared",
           "numbered", "run_asyncpg"]
