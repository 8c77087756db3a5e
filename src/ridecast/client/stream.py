"""``EventStream``: a websocket stream that survives drops and resumes where it stopped.

The decisions live in ``backoff`` and ``protocol`` (pure); this module only drives them:
connect with ``?token=`` (and ``since=<last event_id>`` after the first event), hand each
frame on, and when the connection ends ask ``classify_close`` what to do:

- reconnect: wait ``Backoff.delay(attempt)`` (exponential, with jitter) and connect again,
  resuming from the last event_id, so no event is lost or repeated; given several nodes of
  a cluster, connect to the next one at once instead, and wait only once every node has
  failed in a row (``nodes``);
- refresh the token (4003 unknown, 4004 expired, or a 401 upgrade): get a fresh one at once;
- stop: raise a ``StreamClosed`` subclass (bad path, invisible simulation, expired cursor).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

import pydantic
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ..events import Envelope, parse_event
from .backoff import Action, Backoff, classify_close, classify_handshake
from .errors import ServerError, StreamAuthError, TransportError, stream_error
from .nodes import Nodes, split_urls, stream_wait
from .protocol import Channel, read_frame, stream_url

log = logging.getLogger(__name__)

TokenSource = Callable[[], Awaitable[str]]

# A connection that stayed open this long proved the server's health: the back-off counter
# starts again after it.
STABLE_AFTER_S = 10.0
# A token that held a connection open this long was accepted, so a later 4004 is an expiry
# to fix with a fresh token, not a refusal of the fresh token itself.
TOKEN_PROVEN_AFTER_S = 1.0
MAX_FRAME_BYTES = 16 * 2**20


@dataclass(frozen=True, slots=True)
class Frame:
    """One websocket frame as received: its cursor, its type and the raw JSON text."""

    event_id: str | None
    message_type: str | None
    raw: str


@dataclass(frozen=True, slots=True)
class StreamStatus:
    """A change in a stream's connection, for ``on_status`` (logs, a CLI's status line).

    ``kind`` is ``"connected"``, ``"closed"`` (with ``close_code``/``reason``; ``None`` code
    for a network error) or ``"waiting"`` (``delay`` seconds before retry ``attempt``).
    ``node`` is the websocket base address of the node concerned.
    """

    kind: str
    url_path: str
    since: str | None = None
    close_code: int | None = None
    reason: str = ""
    attempt: int = 0
    delay: float = 0.0
    node: str = ""


class EventStream:
    """Typed events from ``/simulation_events/...``, reconnecting and resuming on drops.

    Iterate it (``async for event in stream``) for typed event models, or ``stream.frames()``
    for the raw frames. ``last_event_id`` is the cursor to resume from later (``since=``).
    Use ``async with`` (or ``aclose()``) to close the connection when you stop early.
    ``ws_base`` is one websocket base address, or those of every node of a cluster.
    """

    def __init__(
        self,
        ws_base: str | Sequence[str],
        token_source: TokenSource,
        channel: Channel,
        *,
        since: str | None = None,
        backoff: Backoff | None = None,
        on_status: Callable[[StreamStatus], None] | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._nodes = Nodes(split_urls(ws_base))
        self._token_source = token_source
        self.channel = channel
        self.last_event_id = since
        self._backoff = backoff or Backoff()
        self._on_status = on_status
        self._rand = rand
        self._ws: ClientConnection | None = None
        self._iterator: AsyncIterator[Envelope] | None = None
        self._generators: list[AsyncGenerator[Frame | Envelope, None]] = []
        self._closed = False
        self._stop = asyncio.Event()

    def __aiter__(self) -> AsyncIterator[Envelope]:
        if self._iterator is None:
            events = self._events()
            self._generators.append(events)
            self._iterator = events
        return self._iterator

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the stream and close its connection."""
        self._closed = True
        self._stop.set()
        if self._ws is not None:
            await self._ws.close()
        for generator in self._generators:
            # RuntimeError: suspended in another task (in recv or a back-off sleep); closing
            # the socket and setting _stop end that loop at its next step instead.
            with contextlib.suppress(RuntimeError):
                await generator.aclose()

    async def _events(self) -> AsyncGenerator[Envelope, None]:
        async for frame in self.frames():
            try:
                yield parse_event(read_frame(frame.raw).body)
            except pydantic.ValidationError as exc:
                # A type newer than this SDK still arrives, as a plain envelope.
                try:
                    yield Envelope.model_validate_json(frame.raw)
                except pydantic.ValidationError:
                    log.warning("skipping event %s that does not validate: %s", frame.event_id, exc)

    def _status(self, status: StreamStatus) -> None:
        if self._on_status is not None:
            self._on_status(status)

    def frames(self) -> AsyncIterator[Frame]:
        """The raw frames of the stream's types, across reconnections, in event_id order."""
        iterator = self._frames()
        self._generators.append(iterator)
        return iterator

    async def _frames(self) -> AsyncGenerator[Frame, None]:
        loop = asyncio.get_running_loop()
        attempt = 0  # retries in a row since the last healthy connection
        refusals = 0  # token refusals in a row since the last healthy connection
        token: str | None = None
        path = self.channel.path
        while not self._closed:
            healthy = token_proven = False
            code: int | None = None
            reason = ""
            node = self._nodes.current
            base = self._nodes.url
            try:
                if token is None:
                    token = await self._token_source()
                url = stream_url(base, self.channel, token, self.last_event_id)
                async with connect(url, max_size=MAX_FRAME_BYTES, open_timeout=10,
                                   ping_interval=20, close_timeout=5) as ws:
                    self._ws = ws
                    opened = loop.time()
                    self._nodes.answered(node)
                    self._status(StreamStatus("connected", path, since=self.last_event_id,
                                              node=base))
                    try:
                        async for message in ws:
                            raw = message if isinstance(message, str) else message.decode()
                            header = read_frame(raw)
                            if header.event_id is not None:
                                self.last_event_id = header.event_id
                            healthy = True
                            if header.message_type is not None and self.channel.wants(
                                header.message_type
                            ):
                                yield Frame(header.event_id, header.message_type, raw)
                    except ConnectionClosed:
                        pass
                    finally:
                        self._ws = None
                    lived = loop.time() - opened
                    token_proven = healthy or lived >= TOKEN_PROVEN_AFTER_S
                    healthy = healthy or lived >= STABLE_AFTER_S
                    code, reason = ws.close_code, ws.close_reason or ""
                    action = classify_close(code)
            except InvalidStatus as exc:
                reason = f"HTTP {exc.response.status_code}"
                action = classify_handshake(exc.response.status_code)
                if action is Action.STOP:
                    raise stream_error(4000, f"upgrade refused with {reason}") from exc
            except (OSError, TimeoutError, InvalidHandshake, TransportError, ServerError) as exc:
                action, reason = Action.RECONNECT, f"{type(exc).__name__}: {exc}"
            if self._closed:
                return
            self._status(StreamStatus("closed", path, self.last_event_id, code, reason,
                                      node=base))
            if healthy:
                attempt = 0
            if token_proven:
                refusals = 0
            if action is Action.STOP:
                raise stream_error(code or 4000, reason)
            if action is Action.REFRESH_TOKEN:
                refusals += 1
                if refusals > 1:
                    raise StreamAuthError(code or 4003, f"a fresh token was refused too: {reason}")
                token = None
                continue
            # The next node, resuming with since=: at once while this round has one left.
            self._nodes.failed(node)
            delay = stream_wait(self._backoff, attempt, len(self._nodes.urls), self._rand())
            attempt += 1
            self._status(StreamStatus("waiting", path, self.last_event_id, code, reason,
                                      attempt, delay, node=self._nodes.url))
            # Sleep, but wake at once if aclose() is called meanwhile.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
