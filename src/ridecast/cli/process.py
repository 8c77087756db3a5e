"""Process exit after an orderly asyncio shutdown.

aiosqlite runs each connection in a non-daemon thread. A connection that a cancelled query
left checked out is never closed, and its thread would then keep the interpreter alive
after everything else has stopped. Everything durable is committed by then (events, outbox
rows, leases), so the process exits anyway after a short grace period, and says so.
"""

from __future__ import annotations

import logging
import os
import threading
import time

log = logging.getLogger(__name__)


def exit_despite_lingering_threads(code: int = 0, grace_s: float = 5.0) -> None:
    """Wait up to ``grace_s`` for non-daemon threads, then exit with ``code`` regardless."""
    deadline = time.monotonic() + grace_s
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
    lingering = [t.name for t in threading.enumerate()
                 if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if lingering:
        log.warning("exiting with %d thread(s) still running: %s", len(lingering),
                    ", ".join(lingering))
        logging.shutdown()
        os._exit(code)
