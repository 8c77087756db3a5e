"""Revocation seen by every process: a poll of the store's revocation epoch.

``ridecast users revoke`` may run in another process (the CLI against the server's store),
or another API node may take the request: either way the revocation bumps
``auth_state.revocation_epoch`` in the same transaction. Each process reads that one integer
every ``RIDECAST_REVOCATION_POLL_S`` (one indexed single-row read) and, when it moved, calls
its listeners: the account store drops its credential cache and the hub closes the open
streams whose tokens no longer authorise them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..errors import ServiceUnavailable
from .accounts import AccountStore

log = logging.getLogger(__name__)

Listener = Callable[[], Awaitable[None]]


class RevocationWatcher:
    """Calls its listeners soon after any process revokes a user, a key or a token."""

    def __init__(self, accounts: AccountStore, *, interval_s: float) -> None:
        self._accounts = accounts
        self._interval_s = interval_s
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._epoch: int | None = None

    @property
    def epoch(self) -> int | None:
        """The last epoch seen (None before ``start``)."""
        return self._epoch

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` (awaited, in order) each time the epoch moves."""
        self._listeners.append(listener)

    async def start(self) -> None:
        self._epoch = await self._accounts.revocation_epoch()
        self._task = asyncio.create_task(self._loop(), name="ridecast-revocation-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def check(self) -> bool:
        """Read the epoch once; if it moved, notify the listeners. True when it moved."""
        epoch = await self._accounts.revocation_epoch()
        if epoch == self._epoch:
            return False
        self._epoch = epoch
        self._accounts.clear_cache()
        for listener in self._listeners:
            try:
                await listener()
            except Exception:
                log.exception("a revocation listener failed")
        return True

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.check()
            except ServiceUnavailable as exc:  # the store is down (its engine logs it):
                # try again next time, keep the caches
                log.debug("could not read the revocation epoch: %s", exc)
            except Exception:
                log.warning("could not read the revocation epoch", exc_info=True)
