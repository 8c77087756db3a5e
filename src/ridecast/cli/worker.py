"""``ridecast worker``: a process that only delivers webhooks, from the shared store.

Run it next to ``ridecast serve`` (started with ``RIDECAST_WEBHOOK_WORKERS=false``) on the
same ``RIDECAST_DATABASE_URL``; several workers share the outbox through leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .process import exit_despite_lingering_threads

if TYPE_CHECKING:
    from ..runtime import Runtime


async def run_worker() -> None:
    """Deliver webhooks until SIGINT or SIGTERM."""
    from ..app import open_runtime
    from ..config import get_settings

    settings = get_settings()
    runtime = await open_runtime(settings, serve_streams=False, run_simulator=False,
                                 run_dispatcher=True, watch_outbox=True)
    loop = type(asyncio.get_running_loop()).__module__
    # Bounded: whatever is not recorded by then is still leased in the outbox and is
    # delivered again after the lease, so nothing is lost by giving up.
    await serve_until_signalled(
        runtime, f"webhook worker running on {store_address(settings.database_url)} "
        f"(event loop: {loop}); stop it with Ctrl-C or SIGTERM", close_timeout_s=10)


def store_address(database_url: str) -> str:
    """The store's address without its password: secrets never reach a log."""
    from sqlalchemy.engine import make_url

    return make_url(database_url).render_as_string(hide_password=True)


async def serve_until_signalled(runtime: Runtime, banner: str, *,
                                close_timeout_s: float) -> None:
    """Say ``banner`` on stderr, wait for SIGINT or SIGTERM, then close ``runtime``, giving
    up after ``close_timeout_s`` (what the caller's process leaves undone is retaken after
    its leases)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    # Printed, not logged: at the default level (warning) a started process said nothing.
    print(f"ridecast: {banner}", file=sys.stderr, flush=True)
    try:
        await stop.wait()
    finally:
        try:
            await asyncio.wait_for(runtime.close(), timeout=close_timeout_s)
        except TimeoutError:
            logging.getLogger(__name__).warning(
                "shutdown took over %g s; exiting anyway", close_timeout_s)


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop where it is installed (it comes with ``uvicorn[standard]``), as
    ``ridecast serve`` runs on through uvicorn's ``loop="auto"``: a worker's time goes to
    the HTTP exchanges with receivers, which uvloop's transports make cheaper."""
    try:
        import uvloop
    except ImportError:  # not built for every platform (Windows): asyncio's own loop
        return None
    return uvloop.new_event_loop


def run_on_best_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` to completion on ``event_loop_factory``'s loop."""
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(main)


def worker() -> None:
    """Run only the webhook dispatcher against RIDECAST_DATABASE_URL (no HTTP API)."""
    from ..config import get_settings
    from .datadir import prepare_store

    prepare_store(get_settings())
    logging.basicConfig(
        level=get_settings().log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from . import gctuning, startlog

    startlog.quiet_pool(get_settings().log_level)
    gctuning.tune()
    run_on_best_loop(run_worker())
    exit_despite_lingering_threads()
