"""A store that does not answer reaches clients as 503 ``service_unavailable``, once for all.

Every route, the websocket hub and the background loops reach the database through one
engine, so the engine is where a driver's error is translated (STYLE habit 8): a
connection that died (``pg_terminate_backend``, a restarted or failed-over PostgreSQL), a
connection that cannot be opened (refused, unreachable, too many clients, the database not
accepting connections), or an SQLite file that is locked, full or unreadable becomes
``ServiceUnavailable`` with ``Retry-After``. SQLAlchemy has already invalidated the dead
connection (and the pool's other connections of its generation) when the error is raised,
so the client's retry gets a fresh one.

Errors that say the request or the schema is wrong (a constraint, a syntax error, a missing
table) are not outages: they stay SQLAlchemy's, for the code that expects them (an
``IntegrityError`` caught by its caller) or as a logged 500 that points at the bug.

The log hears of an outage from here too, once: a line when the store stops answering, a
summary at most every ``RIDECAST_OUTAGE_LOG_INTERVAL_S``, and a line when a connection opens
again (``connectivity.py``). The background loops that meet the same outage (revocations,
webhook claims, retention, the bus's catch-up) then log it at debug level only, where each
of them used to log a traceback per try.

``is_outage`` is the rule, pure; ``install`` hooks it into an engine.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import event
from sqlalchemy.engine import Dialect, Engine, ExceptionContext
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..connectivity import Connectivity
from ..errors import ServiceUnavailable

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1.0
"""The ``Retry-After`` of the 503: the pool opens a fresh connection on the next request."""

# PostgreSQL SQLSTATE classes that mean "the server or the connection", not "the request":
# 08 connection exception, 53 insufficient resources (too many connections, disk full),
# 58 system error (I/O), 57P01-57P03 admin or crash shutdown, cannot connect now.
_PG_OUTAGE_CLASSES = ("08", "53", "58")
_PG_OUTAGE_PREFIXES = ("57P",)

# SQLite primary result codes of a file that cannot be used now: BUSY, LOCKED, NOMEM,
# READONLY, IOERR, FULL, CANTOPEN, PROTOCOL. SQLITE_ERROR (a missing table, a syntax
# error) is a bug, not an outage.
_SQLITE_OUTAGE_CODES = frozenset({5, 6, 7, 8, 10, 13, 14, 15})


def is_outage(orig: BaseException | None, *, disconnect: bool, connecting: bool,
              operational: bool) -> bool:
    """Whether a driver error means the store is unavailable (a 503), not a bug (a 500).

    ``orig`` is the driver's exception; ``disconnect``: SQLAlchemy found the connection
    dead; ``connecting``: no connection could be opened; ``operational``: SQLAlchemy
    classed it as ``OperationalError`` (what psycopg raises for a lost server).
    """
    if disconnect or connecting:
        return True
    sqlite_code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(sqlite_code, int):
        return sqlite_code & 0xFF in _SQLITE_OUTAGE_CODES
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate[:2] in _PG_OUTAGE_CLASSES or sqlstate.startswith(_PG_OUTAGE_PREFIXES)
    return operational


def unavailable(exc: BaseException) -> ServiceUnavailable:
    """The error clients get for a store outage caused by ``exc`` (503, close 4101)."""
    cause = exc
    while getattr(cause, "orig", None) is not None:  # SQLAlchemy's wrapper, then the driver's
        cause = cause.orig  # type: ignore[attr-defined]
    return ServiceUnavailable(
        f"the store did not answer ({type(cause).__name__}); retry after Retry-After seconds",
        retry_after=RETRY_AFTER_S,
    )


class _Watch:
    """One engine's hooks: translate its outage errors, and report its link's state."""

    def __init__(self, log_interval_s: float) -> None:
        self.link = Connectivity(
            "store (database)", log_interval_s,
            "requests that need it answer 503 service_unavailable; nothing is half-stored; "
            "retrying")

    def _report(self, line: str | None) -> None:
        if line is not None:
            log.warning("%s", line)

    def handle_error(self, context: ExceptionContext) -> None:
        if context.is_pre_ping:  # the pool is testing a connection: let it judge
            return
        if not isinstance(context.original_exception, Exception):
            # A cancellation (or KeyboardInterrupt) met inside a query. SQLAlchemy marks it
            # a disconnect, so that the connection is dropped; it must still propagate as
            # itself: turned into a 503 it was swallowed, and a task cancelled at shutdown
            # (a loop that retries on ServiceUnavailable) ran on and the process never
            # exited.
            return
        if is_outage(context.original_exception, disconnect=context.is_disconnect,
                     connecting=context.connection is None,
                     operational=isinstance(context.sqlalchemy_exception, OperationalError)):
            what = "connect" if context.connection is None else "query"
            self._report(self.link.failed(what, context.original_exception, time.monotonic()))
            # Raised here, after SQLAlchemy's clean-up (the dead connection is invalidated).
            raise unavailable(context.original_exception)

    def connect(self, dialect: Dialect, _record: Any, cargs: Any, cparams: Any) -> Any:
        try:
            return dialect.connect(*cargs, **cparams)
        except OSError as exc:
            # Refused, unreachable or timed out: asyncpg raises these unwrapped, so they
            # never reach ``handle_error``.
            self._report(self.link.failed("connect", exc, time.monotonic()))
            raise unavailable(exc) from exc

    def connected(self, _dbapi_connection: Any, _record: Any) -> None:
        self._report(self.link.succeeded(time.monotonic()))


_watches: WeakKeyDictionary[Engine, _Watch] = WeakKeyDictionary()


def install(engine: AsyncEngine, *, log_interval_s: float = 30.0) -> Connectivity:
    """Translate ``engine``'s outage errors into ``ServiceUnavailable`` from now on, and
    report them in the log at most every ``log_interval_s``; returns the link's state."""
    watch = _watches[engine.sync_engine] = _Watch(log_interval_s)
    event.listen(engine.sync_engine, "handle_error", watch.handle_error)
    event.listen(engine.sync_engine, "do_connect", watch.connect)
    event.listen(engine.sync_engine, "connect", watch.connected)
    return watch.link


def driver_error(conn: AsyncConnection, exc: Exception, *, disconnect: bool) -> Exception:
    """What to raise for ``exc``, a driver's error met on ``conn``'s driver connection
    outside SQLAlchemy's ``execute`` (``pgsteps``): ``ServiceUnavailable`` for an outage,
    reported in the log as the engine's own errors are; otherwise ``exc`` itself.
    ``disconnect``: the connection is closed now."""
    if not is_outage(exc, disconnect=disconnect, connecting=False, operational=False):
        return exc
    watch = _watches.get(conn.sync_engine)
    if watch is not None:
        watch._report(watch.link.failed("query", exc, time.monotonic()))
    return unavailable(exc)
