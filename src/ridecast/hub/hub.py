"""The websocket hub: authorises streams, routes bus events to them, resumes, shuts down.

One ``Hub`` per process hangs off the bus. For each stored event it asks the
``SubscriptionIndex`` which streams receive it and hands every one the same frame bytes;
nothing on that path awaits. A connection, whichever listener accepted it, goes through
``Hub.serve``: token, path, visibility and cursor are checked, and a refusal is sent as
a close frame with the code of the shared error table (browsers cannot read a handshake's
HTTP status, so every refusal happens after the handshake).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..auth.credentials import parse_ws_token
from ..auth.secrets import hash_secret
from ..auth.visibility import Principal, can_see
from ..bus import Bus, BusMessage, SimulationChanged, StoredEvent
from ..config import Settings
from ..errors import NotFound, RidecastError, ServiceUnavailable, Unauthorized
from ..limits import Limits
from ..metrics import WS_CLOSED, WS_CONNECTIONS, WS_FANOUT, WS_FRAMES_SENT
from ..ports import EventReader, RevocationFeed, SimulationDirectory, TokenChecker
from .connection import Sink, Stream, close_reason
from .expiry import ExpiryHeap
from .frames import text_frame, text_frames
from .index import BucketKey, SubscriptionIndex, bucket_keys
from .keepalive import Keepalive
from .paths import Route, parse_path, parse_since

log = logging.getLogger(__name__)

REPLAY_PAGE = 500
"""Events read from the log per query while replaying ``since=``."""

TOKEN_CACHE_S = 2.0
"""How long a checked token is trusted without asking the store again.

A token is looked up once per connection; a burst of reconnects (after a restart, say)
would otherwise be one database query each. Expiry is still exact: it is checked against
the cached ``expires_at`` on every use.
"""

_TOKEN_CACHE_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Prepared:
    """A connection authorised (``stream``) or refused (``error``) before its handshake."""

    sink: Sink
    stream: Stream | None
    cursor: int | None
    error: RidecastError | None


_Part = tuple[dict[Stream, None], list[StoredEvent], list[bytes]]
"""A bucket, the events of a bus batch that go to it and their encoded frames."""


class Hub:
    """Every websocket stream of this process.

    It hears stored events and simulation changes on ``bus``, checks tokens with
    ``tokens``, visibility with ``directory``, replays ``since=`` from ``events``, and closes
    streams at once when ``revocations`` reports a revocation.
    """

    def __init__(self, settings: Settings, *, bus: Bus, tokens: TokenChecker,
                 directory: SimulationDirectory, events: EventReader,
                 revocations: RevocationFeed, limits: Limits) -> None:
        self._settings = settings
        self._tokens_store = tokens
        self._directory = directory
        self._events = events
        self._revocations = revocations
        self._queue_limit = settings.ws_send_queue
        self._index: SubscriptionIndex[Stream] = SubscriptionIndex()
        self._tokens: dict[str, tuple[Principal, float, float]] = {}
        self._closing = False
        self._batches = 0
        # The dedicated listener (``listener.py``), when RIDECAST_WS_PORT is set.
        self.listener: asyncio.Server | None = None
        # One timer for every stream's token expiry, one for every connection's pings.
        self._expiry = ExpiryHeap(lambda: len(self._index))
        self.keepalive = Keepalive(settings.ws_ping_interval_s)
        self._unsubscribe = bus.subscribe(self._on_bus)
        revocations.subscribe(self._on_revocation)
        # Open streams per user and per token, against RIDECAST_WS_MAX_STREAMS_PER_*
        # (counted for the whole cluster when the limits are on Redis).
        self._limits = limits
        self._rechecks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._index)

    # ---- the publishing path -----------------------------------------------------------

    def _on_bus(self, messages: Sequence[BusMessage]) -> None:
        """Hand a bus batch to every receiving stream: one write per stream per batch.

        Events are grouped by bucket (streams with the same filter and visibility): each
        event's frame is encoded once, the frames of one bucket are joined once, and every
        stream of the bucket takes the same bytes. A stream that also receives events as
        their owner's (``owner_receivers``) has its frames merged in event order.
        """
        index = self._index
        self._batches += 1
        if not len(index):  # no stream open on this node: nothing to plan or deliver
            return
        started = time.perf_counter()
        sent = 0
        batch = self._batches
        plan: dict[BucketKey, _Part] = {}
        extra: dict[Stream, list[StoredEvent]] = {}
        for message in messages:
            if isinstance(message, StoredEvent):
                wire = None
                for key, bucket in index.buckets_for(
                    message.simulation_id, message.message_type, message.org_id
                ):
                    part = plan.get(key)
                    if part is None:
                        part = plan[key] = (bucket, [], [])
                    if wire is None:
                        wire = text_frame(message.frame)
                    part[1].append(message)
                    part[2].append(wire)
                for stream in index.owner_receivers(
                    message.message_type, message.org_id, message.owner_id
                ):
                    extra.setdefault(stream, []).append(message)
            elif isinstance(message, SimulationChanged) and message.deleted:
                # What came before the deletion reaches the streams before their close.
                sent += self._deliver(plan, extra, batch)
                plan, extra = {}, {}
                for stream in index.simulation_members(message.simulation_id):
                    stream.abort("simulation_not_found", "the simulation was deleted")
        sent += self._deliver(plan, extra, batch)
        if sent:
            WS_FRAMES_SENT.inc(sent)
            WS_FANOUT.observe(time.perf_counter() - started)

    @staticmethod
    def _deliver(plan: dict[BucketKey, _Part], extra: dict[Stream, list[StoredEvent]],
                 batch: int) -> int:
        sent = 0
        for bucket, events, wires in plan.values():
            data = b"".join(wires)
            if extra:
                for stream in bucket:
                    if stream not in extra:
                        stream.take(events, data, batch)
            else:
                for stream in bucket:
                    stream.take(events, data, batch)
            sent += len(events) * len(bucket)
        for stream, more in extra.items():
            own = plan.get(bucket_keys(stream)[0])
            events = sorted([*(own[1] if own else ()), *more], key=lambda e: e.event_id)
            stream.take(events, text_frames(e.frame for e in events), batch)
            sent += len(events)
        return sent

    # ---- opening a stream --------------------------------------------------------------

    async def _check_token(self, token: str) -> tuple[Principal, float]:
        now = time.time()
        cached = self._tokens.get(token)
        if cached is not None and now - cached[2] < TOKEN_CACHE_S:
            principal, expires_at, _checked = cached
        else:
            principal, expires_at = await self._tokens_store.check_token(token)
            if len(self._tokens) >= _TOKEN_CACHE_MAX:
                self._tokens.clear()
            self._tokens[token] = (principal, expires_at, now)
        if expires_at <= now:
            raise Unauthorized("the token has expired", code="token_expired")
        return principal, expires_at

    async def _on_revocation(self) -> None:
        """Someone revoked a user, key or token: close the streams it authorised, at once."""
        self._tokens.clear()
        held = {stream: stream.token_hash for stream in self._index.members()
                if not stream.closed}
        if not held:
            return
        revoked = await self._tokens_store.revoked_tokens(set(held.values()))
        for stream, token in held.items():
            if token in revoked:
                stream.abort("access_revoked", "access revoked: the user, key or token")

    async def authorise(
        self, path: str, query_token: str | None, header: str | None, since: str | None
    ) -> tuple[Principal, float, Route, int | None]:
        """Who the client is, what it subscribes to and where it resumes; raises on refusal."""
        token = parse_ws_token(query_token, header)
        principal, expires_at = await self._check_token(token)
        route = parse_path(path)
        if route.simulation_id is not None:
            meta = await self._directory.get(route.simulation_id)
            if meta is None or not can_see(principal, org_id=meta.org_id, owner_id=meta.owner_id):
                raise NotFound(
                    f"simulation {route.simulation_id} does not exist or is not visible to you",
                    code="simulation_not_found",
                )
        return principal, expires_at, route, parse_since(since)

    async def prepare(
        self, sink: Sink, path: str, query_token: str | None, header: str | None,
        since: str | None,
    ) -> Prepared:
        """Authorise a connection before its handshake completes, and subscribe it.

        The stream is indexed (holding live events) before the server answers the
        handshake, so a client whose connect() has returned receives every event
        published from then on. A refusal is kept, to be sent as a close frame by ``run``.
        """
        if self._closing:
            return Prepared(sink, None, None, RidecastError("shutting down",
                                                            code="server_going_away"))
        epoch = self._revocations.epoch
        try:
            principal, expires_at, route, cursor = await self.authorise(
                path, query_token, header, since
            )
            token_hash = hash_secret(parse_ws_token(query_token, header))
        except RidecastError as exc:
            return Prepared(sink, None, None, exc)
        except Exception:  # the store failed: a close code the client can act on, not a 500
            log.exception("authorising a websocket failed")
            return Prepared(sink, None, None, ServiceUnavailable(
                "the store did not answer; reconnect with back-off"))
        if self._closing:  # shutdown began while the token was being checked
            return Prepared(sink, None, None, RidecastError("shutting down",
                                                            code="server_going_away"))
        settings = self._settings
        if not await self._limits.open_stream(principal.user_id, token_hash):
            return Prepared(sink, None, None, RidecastError(
                "too many open streams for this user or token "
                f"(RIDECAST_WS_MAX_STREAMS_PER_USER={settings.ws_max_streams_per_user}, "
                f"_PER_TOKEN={settings.ws_max_streams_per_token})", code="too_many_streams"))
        if self._closing:  # shutdown began while the stream was being counted
            self._limits.close_stream(principal.user_id, token_hash)
            return Prepared(sink, None, None, RidecastError("shutting down",
                                                            code="server_going_away"))
        stream = Stream(
            sink, principal, route, queue_limit=self._queue_limit, on_close=self._forget,
            token_hash=token_hash, queue_bytes=settings.ws_send_queue_bytes,
        )
        loop = asyncio.get_running_loop()
        self._expiry.add(loop.time() + (expires_at - time.time()), stream)
        if self._revocations.epoch != epoch:
            # A revocation was seen while this token was being checked: check again.
            task = loop.create_task(self._on_revocation())
            self._rechecks.add(task)
            task.add_done_callback(self._rechecks.discard)
        # Held until ``run``: nothing may be written before the handshake answer, and
        # with since= the replay must come first. Indexed before the replay reads the
        # log, so an event is either committed before the read (replayed) or published
        # after indexing (held), never neither.
        stream.begin_replay()
        self._index.add(stream)
        WS_CONNECTIONS.inc()
        return Prepared(sink, stream, cursor, None)

    async def start(self, prepared: Prepared) -> None:
        """Once its handshake is done: refuse a connection with its close frame, or replay
        ``since=`` and go live. Returns then; the connection's end calls ``stream.detach``."""
        stream, sink = prepared.stream, prepared.sink
        if stream is None:
            exc = prepared.error or RidecastError("no stream")
            WS_CLOSED.labels(exc.code).inc()
            await sink.close(*close_reason(exc.code, exc.message))
            return
        try:
            if prepared.cursor is not None:
                await self._replay(stream, prepared.cursor)
            elif stream.take_overflow():
                # More live events arrived during the handshake than the hold keeps;
                # without a cursor they cannot be re-read, so say so rather than skip.
                stream.abort("slow_consumer")
            else:
                stream.go_live(0)
        except Exception:  # a client that vanished mid-replay, say: nothing to report
            log.debug("stream ended with an error", exc_info=True)
            stream.detach()

    async def run(self, prepared: Prepared) -> None:
        """``start``, then wait for the connection to end (a sink that only tells its end by
        being read, as ASGI's)."""
        try:
            await self.start(prepared)
            if prepared.stream is not None:
                await prepared.sink.wait_closed()
        except Exception:
            log.debug("stream ended with an error", exc_info=True)
        finally:
            if prepared.stream is not None:
                prepared.stream.detach()

    @staticmethod
    def discard(prepared: Prepared) -> None:
        """Forget a prepared connection whose handshake failed."""
        if prepared.stream is not None:
            prepared.stream.detach()

    async def serve(
        self, sink: Sink, path: str, query_token: str | None, header: str | None,
        since: str | None, accept: Callable[[], Awaitable[None]],
    ) -> None:
        """``prepare``, then ``accept()`` (send the handshake answer), then ``run``."""
        prepared = await self.prepare(sink, path, query_token, header, since)
        try:
            await accept()
        except BaseException:
            self.discard(prepared)
            raise
        await self.run(prepared)

    def _forget(self, stream: Stream) -> None:
        if self._index.remove(stream):
            WS_CONNECTIONS.dec()
            self._limits.close_stream(stream.principal.user_id, stream.token_hash)

    async def _replay(self, stream: Stream, since: int) -> None:
        try:
            await self._replay_from_log(stream, since)
        except ServiceUnavailable:
            # The store failed mid-replay: say so with a code the client acts on (reconnect
            # with back-off and since=), rather than dropping the connection with 1006.
            log.exception("replaying since=%d failed", since)
            stream.abort("service_unavailable",
                         "the replay failed; reconnect with back-off and since=")

    async def _replay_from_log(self, stream: Stream, since: int) -> None:
        oldest, _newest = await self._events.bounds()
        if oldest and since < oldest - 1:
            stream.abort(
                "cursor_expired",
                f"since={since} is before the oldest retained event {oldest}",
            )
            return
        route, who = stream.route, stream.principal
        org_filter = None if (who.is_admin or route.simulation_id is not None) else who.org_id
        types = [route.message_type] if route.message_type else None
        after = since
        while not stream.closed:
            stream.take_overflow()
            page = await self._events.read(
                after=after, limit=REPLAY_PAGE, simulation_id=route.simulation_id,
                message_types=types, org_id=org_filter,
            )
            for event in page:
                if stream.closed:
                    return
                if can_see(who, org_id=event.org_id, owner_id=event.owner_id):
                    await stream.send_replayed(event.frame)
                after = event.event_id
            # Caught up only when the log had nothing more *and* every live event since
            # that read is still held; otherwise read again from where the replay is.
            if len(page) < REPLAY_PAGE and not stream.take_overflow():
                break
        stream.go_live(after)

    # ---- shutdown ----------------------------------------------------------------------

    async def close(self) -> None:
        """Close every stream with 1001 (going away) so clients resume elsewhere."""
        self._closing = True
        self._unsubscribe()
        self.keepalive.stop()
        self._expiry.stop()
        streams = self._index.members()
        for stream in streams:
            stream.abort("server_going_away")
        # Give the close frames a moment to reach the clients before the loop stops.
        closing = [s.closing for s in streams if s.closing is not None]
        if closing:
            await asyncio.wait(closing, timeout=2.0)
        if self.listener is not None:
            self.listener.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.listener.wait_closed(), 2.0)
            self.listener = None
