"""Every driver connection an engine opens, so that none outlives the engine.

A task cancelled while SQLAlchemy's pool opens a connection for it (a client gone, a part
stopped at shutdown) leaves the driver's connection outside the pool: SQLAlchemy never
received it, so ``engine.dispose()`` cannot close it. With aiosqlite that connection's
thread lives on, and once the event loop has closed it fails handing back its last result
(``RuntimeError: Event loop is closed``); with asyncpg the server keeps a backend until the
garbage collector finds the socket.

``DriverConnections.connect`` is the engine's ``async_creator_fn``: a connect runs to its
end whatever happens to the task that asked for it, and a connection nobody received any
more is closed at once. ``close_engine`` disposes of the pool, then closes whatever the
pool no longer knew of (a connection a cancelled query left checked out).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from threading import Thread
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

Connect = Callable[..., Awaitable[Any]]


class DriverConnections:
    """The driver connections one engine opened and has not closed, and the closes of
    connections whose connect outlived the task that asked for them."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._open: weakref.WeakSet[Any] = weakref.WeakSet()
        self._pending: set[asyncio.Task[Any]] = set()

    async def connect(self, *args: Any, **kwargs: Any) -> Any:
        """The driver's connect, shielded from the caller's cancellation: a connection
        that arrives after its caller was cancelled is closed, not left open."""
        opening = self._track(asyncio.ensure_future(self._opened(args, kwargs)))
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(self._close_orphan)
            raise

    async def _opened(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        connection = self._connect(*args, **kwargs)
        _daemonise(connection)
        opened = await connection
        self._open.add(opened)
        return opened

    def _close_orphan(self, opening: asyncio.Task[Any]) -> None:
        if not opening.cancelled() and opening.exception() is None:
            self._track(asyncio.ensure_future(_close(opening.result())))

    def _track(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def close_all(self) -> None:
        """Wait for connects and closes under way, then close every connection still open."""
        while self._pending:
            await asyncio.wait(set(self._pending))
        for connection in list(self._open):
            await _close(connection)


def _daemonise(connection: Any) -> None:
    """aiosqlite's thread as a daemon, as SQLAlchemy makes it when it connects itself: a
    connection that escaped every close must not keep the interpreter alive."""
    thread = connection if isinstance(connection, Thread) else getattr(connection, "_thread", None)
    if isinstance(thread, Thread) and not thread.is_alive():
        thread.daemon = True


async def _close(connection: Any) -> None:
    """Close a driver connection, once: asyncpg's at once (``terminate``: it may be in the
    middle of a query nobody waits for), aiosqlite's after what its thread is running."""
    try:
        if hasattr(connection, "terminate"):
            if not connection.is_closed():
                connection.terminate()
        else:
            await connection.close()  # aiosqlite: does nothing when already closed
    except Exception as exc:  # closing what is broken anyway: say so and go on
        log.debug("closing a driver connection failed: %r", exc)


_REGISTRIES: weakref.WeakKeyDictionary[Any, DriverConnections] = weakref.WeakKeyDictionary()


def register(engine: AsyncEngine, connections: DriverConnections) -> None:
    """Remember ``connections`` as ``engine``'s, for ``close_engine``."""
    _REGISTRIES[engine.sync_engine] = connections


async def close_engine(engine: AsyncEngine) -> None:
    """Dispose of ``engine``'s pool, then close every driver connection it opened that is
    still open."""
    await engine.dispose()
    connections = _REGISTRIES.get(engine.sync_engine)
    if connections is not None:
        await connections.close_all()
