"""The Redis bus: every process of a cluster sees the same messages, in ``event_id`` order.

Publishing is one pipelined ``XADD`` per message to one stream (``<prefix>:bus``), trimmed
to about ``maxlen`` entries. Every process runs one reader (``XREAD BLOCK``) and hands what
it reads to its local handlers, exactly as the in-process bus does, so the hub and the
webhook dispatcher cannot tell the two apart.

Order and completeness come from the event log, not from Redis. Event ids are contiguous
and assigned in commit order (``store.eventlog``), but two nodes may ``XADD`` in the other
order, a node may commit and die before it publishes, and a reader may lose its connection.
So the reader keeps the last ``event_id`` it delivered:

* an event at or below it is a duplicate and is dropped;
* an event above the next id reveals a gap: the missing ids are read from the log and
  delivered first;
* every ``catch_up_interval_s`` the log's newest id is compared with it, so a gap is filled
  even when nothing else is published (the node that committed died before ``XADD``).

After a dropped connection or a restarted Redis the reader reconnects with back-off and
resumes from its last stream id; anything it missed comes from the log.

A Redis that does not answer is never waited on for long and never shown raw: each publish
and ping gives up after ``timeout_s`` and raises ``ServiceUnavailable`` (while it stays
unreachable, a publish tries it at most every ``_PROBE_INTERVAL_S`` and fails at once
otherwise) (the event log
then counts on the catch-up, a simulation change on the caches' time-to-live), and the
log gets one line when the link breaks, one when it is back and a summary at most every
``error_log_interval_s`` between the two (``connectivity.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from ..connectivity import Connectivity
from ..errors import ServiceUnavailable
from .base import (
    BusMessage,
    Handler,
    Handlers,
    LogReader,
    SimulationChanged,
    SimulatorCommand,
    SimulatorReply,
    StoredEvent,
    Unsubscribe,
)

log = logging.getLogger(__name__)

STREAM_SUFFIX = ":bus"
"""The stream key is ``<prefix>:bus``, the bus's one Redis key; the limits keep theirs under
``<prefix>:limits:*`` (``limits/scripts.py``)."""

_CONTROL: dict[str, type[Any]] = {
    cls.__name__: cls for cls in (SimulationChanged, SimulatorCommand, SimulatorReply)
}
_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)
# While Redis is unreachable, a publish tries it at most this often; the others fail at
# once. A hung Redis would otherwise hold the event log's publisher ``timeout_s`` per batch,
# and the committed events waiting behind it count against ingest's back-pressure.
_PROBE_INTERVAL_S = 0.5


def encode(message: BusMessage) -> dict[str, bytes | str | int]:
    """One stream entry's fields for ``message``."""
    if isinstance(message, StoredEvent):
        return {
            "k": "e", "id": message.event_id, "sim": message.simulation_id,
            "org": message.org_id, "own": message.owner_id, "type": message.message_type,
            "wh": int(message.has_webhook), "body": message.body,
        }
    return {"k": "c", "t": type(message).__name__,
            "j": orjson.dumps(dataclasses.asdict(message))}


def decode(fields: dict[bytes, bytes]) -> BusMessage | None:
    """The message of a stream entry (None for one this version does not know)."""
    if fields.get(b"k") == b"e":
        return StoredEvent(
            event_id=int(fields[b"id"]), simulation_id=int(fields[b"sim"]),
            org_id=int(fields[b"org"]), owner_id=int(fields[b"own"]),
            message_type=fields[b"type"].decode(), body=fields[b"body"],
            has_webhook=fields[b"wh"] == b"1",
        )
    cls = _CONTROL.get(fields.get(b"t", b"").decode())
    if cls is None:
        return None
    message: BusMessage = cls(**orjson.loads(fields[b"j"]))
    return message


def _redacted(url: str) -> str:
    """``url`` without its password (a log line must not carry it)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class RedisBus:
    """The bus of a cluster, on one Redis stream (see the module docstring)."""

    def __init__(
        self, url: str, *, prefix: str = "ridecast", maxlen: int = 100_000,
        catch_up_interval_s: float = 1.0, timeout_s: float = 2.0,
        error_log_interval_s: float = 30.0,
    ) -> None:
        self._url = url
        self._timeout_s = timeout_s
        self.link = Connectivity(
            "Redis bus", error_log_interval_s,
            "events are still committed and reach streams and webhooks from the log; "
            "retrying with back-off")
        self.stream = prefix + STREAM_SUFFIX
        self._maxlen = maxlen
        self._interval_s = catch_up_interval_s
        self._handlers = Handlers()
        self._log: LogReader | None = None
        self._redis: Redis | None = None
        self._reader: Redis | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()
        self._last_event_id = 0
        self._last_entry = "$"
        self.reconnects = 0
        self.filled = 0
        self.skipped = 0  # publishes refused without trying, while Redis is unreachable
        self._next_probe = 0.0
        self._closing = False

    def attach_log(self, reader: LogReader) -> None:
        self._log = reader

    async def start(self) -> None:
        # Publishes and pings: bounded, so a Redis that hangs (stopped, a dead network)
        # costs a publish ``timeout_s``, not forever.
        self._redis = Redis.from_url(self._url, socket_timeout=self._timeout_s,
                                     socket_connect_timeout=self._timeout_s)
        # The reader blocks in XREAD: a connection of its own, with a read timeout above
        # the block time so a silent network is noticed.
        self._reader = Redis.from_url(self._url, socket_timeout=10, socket_connect_timeout=5)
        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            raise ConnectionError(
                f"the Redis bus at {_redacted(self._url)} (RIDECAST_BUS_URL) does not "
                f"answer: {exc}") from exc
        if self._log is not None:
            self._last_event_id = await self._log.newest_id()
        # From the stream's current end: what came before is in the log, not needed here.
        info = await self._redis.xinfo_stream(self.stream) if await self._redis.exists(
            self.stream) else None
        if info is not None:
            last = info["last-generated-id"]
            self._last_entry = last.decode() if isinstance(last, bytes) else str(last)
        else:
            self._last_entry = "0-0"
        self._tasks = [
            asyncio.create_task(self._read_loop(), name="ridecast-redis-bus-reader"),
            asyncio.create_task(self._catch_up_loop(), name="ridecast-redis-bus-catch-up"),
        ]

    async def close(self) -> None:
        # redis-py may turn the cancellation of a read in flight into a connection error,
        # which the read loop would take for an outage and retry: the flag ends it anyway.
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._handlers.clear()
        for conn in (self._redis, self._reader):
            if conn is not None:
                with contextlib.suppress(RedisError, OSError):
                    await conn.aclose()

    async def ping(self) -> None:
        """Raises when Redis does not answer within ``timeout_s`` (readiness)."""
        assert self._redis is not None
        await self._redis.ping()

    async def publish(self, messages: Sequence[BusMessage]) -> None:
        """Add ``messages`` to the stream; ``ServiceUnavailable`` when Redis does not take
        them (counted and reported by ``link``, not logged here)."""
        if not messages:
            return
        assert self._redis is not None, "publish before start"
        if not self.link.up and time.monotonic() < self._next_probe:
            self.skipped += 1
            raise ServiceUnavailable("the bus (Redis) is unreachable", retry_after=1)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for message in messages:
                    pipe.xadd(self.stream, encode(message),  # type: ignore[arg-type]
                              maxlen=self._maxlen, approximate=True)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            now = time.monotonic()
            self._next_probe = now + _PROBE_INTERVAL_S
            self._report(self.link.failed("publish", exc, now))
            raise ServiceUnavailable(
                f"the bus (Redis) did not take the message ({type(exc).__name__})",
                retry_after=1,
            ) from exc
        self._report(self.link.succeeded(time.monotonic()))

    @staticmethod
    def _report(line: str | None) -> None:
        if line is not None:
            log.warning("%s", line)

    def subscribe(self, handler: Handler) -> Unsubscribe:
        return self._handlers.subscribe(handler)

    # ---- delivery ------------------------------------------------------------------------

    async def _fill_to(self, upto: int) -> list[BusMessage]:
        """The events after the last delivered up to ``upto``, from the log."""
        if self._log is None or upto <= self._last_event_id:
            return []
        missing = await self._log.read_range(self._last_event_id, upto)
        self.filled += len(missing)
        self._last_event_id = upto
        # The log does not say which events have a webhook delivery; marking every filled
        # event wakes the dispatchers at once (at worst one empty claim) instead of leaving
        # the delivery to their next poll.
        return [replace(event, has_webhook=True) for event in missing]

    async def _deliver(self, messages: Sequence[BusMessage]) -> None:
        async with self._lock:
            out: list[BusMessage] = []
            for message in messages:
                if isinstance(message, StoredEvent):
                    if message.event_id <= self._last_event_id:
                        continue  # delivered already (from the log, or a second XADD)
                    if message.event_id > self._last_event_id + 1:
                        out.extend(await self._fill_to(message.event_id - 1))
                    self._last_event_id = message.event_id
                out.append(message)
            self._handlers.hand_out(out)

    async def _read_loop(self) -> None:
        failures = 0
        while not self._closing:
            assert self._reader is not None
            try:
                answer: Any = await self._reader.xread({self.stream: self._last_entry},
                                                       block=1000, count=1000)
            except (RedisError, OSError) as exc:
                if self._closing:
                    return
                delay = _BACKOFF_S[min(failures, len(_BACKOFF_S) - 1)]
                failures += 1
                self.reconnects += 1
                self._report(self.link.failed("read", exc, time.monotonic()))
                await asyncio.sleep(delay)
                continue
            failures = 0
            self._report(self.link.succeeded(time.monotonic()))
            messages: list[BusMessage] = []
            for _stream, entries in answer or ():
                for entry_id, fields in entries:
                    self._last_entry = (entry_id.decode() if isinstance(entry_id, bytes)
                                        else str(entry_id))
                    message = decode(fields)
                    if message is not None:
                        messages.append(message)
            if messages:
                try:
                    await self._deliver(messages)
                except Exception:  # the log failed during a gap fill: the poll retries
                    log.exception("Redis bus delivery failed")

    async def _catch_up_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._interval_s)
            if self._log is None:
                continue
            try:
                newest = await self._log.newest_id()
                if newest > self._last_event_id:
                    async with self._lock:
                        self._handlers.hand_out(await self._fill_to(newest))
            except ServiceUnavailable as exc:  # the store's outage: logged by its engine
                log.debug("Redis bus catch-up from the log failed: %s", exc)
            except Exception:
                log.warning("Redis bus catch-up from the log failed", exc_info=True)
