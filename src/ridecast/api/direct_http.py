"""The ingest requests on uvicorn's connection, without uvicorn's per-request machinery.

Producers post events one by one over keep-alive connections, and for such a small request
uvicorn's own request cycle (the scope's state copy, an ``asyncio.Event``, a receive that
waits on it, a send that re-checks every header, two socket writes) is a large share of the
server's CPU (docs/performance.md, the ingest benchmark).

``IngestHttpProtocol`` is uvicorn's httptools protocol with one difference: a request that
is plainly ``POST /api/v2/simulation/{id}/events`` with a ``Content-Length`` body within
``RIDECAST_MAX_BODY_BYTES`` is run by ``DirectCycle``. It calls the same ASGI application
uvicorn would (with uvicorn's proxy-headers middleware, so the client address is the same),
once the whole body is in, and writes the status line, headers and body in one write.
Anything else (another path or method, a chunked or oversized body, ``Expect:
100-continue``, an upgrade, a request pipelined behind one in progress) takes uvicorn's
own path unchanged; an upgrade pipelined behind a ``DirectCycle`` waits for its answer.
tests/api/test_direct_http.py checks that both paths answer the same bytes for the same
requests.

Most of those requests need no task at all: when the body is complete, ``DirectCycle``
first asks ``IngestFastPath.start_now`` (api/events.py) to queue the events from the
protocol callback, which it does when everything is in the caches and sure to succeed (no
proxy headers to apply, the runtime open); the 201 is then written from the commit's
future. Otherwise, or when the commit fails, the app answers as above.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, cast

from starlette.types import Message
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

try:  # uvicorn's httptools protocol; without httptools, uvicorn's default is used
    import httptools
    from uvicorn.protocols.http.httptools_impl import (
        HEADER_RE,
        HEADER_VALUE_RE,
        STATUS_LINE,
    )

    from .upgrade_order import OrderedUpgrade
    HAVE_HTTPTOOLS = True
except ImportError:  # pragma: no cover - httptools is a pinned dependency
    HAVE_HTTPTOOLS = False

from ..bus import StoredEvent
from ..runtime import Runtime
from .crosssite import is_json_type
from .events import (
    CREATED_HEADERS,
    INGEST_PATH,
    Accepted,
    IngestFastPath,
    SeenCredentials,
    answer_failure,
)
from .http_guard import HttpBounds, guarded
from .jsonlimits import INT64_MAX
from .upgrade_order import OrderedUpgrade

log = logging.getLogger("uvicorn.error")

_INTERNAL_ERROR = (b"HTTP/1.1 500 Internal Server Error\r\n", b"content-type: text/plain; "
                   b"charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n\r\n"
                   b"Internal Server Error")


# With either, uvicorn's proxy-headers middleware may change the client's address.
_FORWARDED = (b"x-forwarded-for", b"x-forwarded-proto")


class NowTarget:
    """The ``IngestFastPath`` of the application under uvicorn's proxy-headers middleware,
    and its runtime once the lifespan has opened it (it is never replaced after that)."""

    __slots__ = ("_app", "_runtime", "fast")

    def __init__(self, fast: IngestFastPath, app: Any) -> None:
        self.fast = fast
        self._app = app
        self._runtime: Runtime | None = None

    def runtime(self) -> Runtime | None:
        """The app's runtime (None before the lifespan opened it)."""
        if self._runtime is None:
            self._runtime = getattr(self._app.state, "runtime", None)
        return self._runtime


@dataclass(slots=True)  # not frozen: built per request, and frozen costs more to build
class NowIngest:
    """What ``IngestFastPath.start_now`` needs of a request besides its body."""

    target: NowTarget
    simulation_id: int
    authorization: str | None
    seen: SeenCredentials  # the connection's


# ``DirectCycle._head``'s answers: (status, headers, keep-alive, body length) -> (head,
# keep-alive off), for the default headers in ``_HEADS_FOR`` (uvicorn renews that list, with
# its date header, every second).
_HEADS: dict[tuple[int, tuple[tuple[bytes, bytes], ...], bool, int], tuple[bytes, bool]] = {}
_HEADS_FOR: list[Any] = [None]


class _Disconnect:
    """What uvicorn's protocol calls ``cycle.message_event``: set when the client leaves."""

    __slots__ = ("_waiter",)

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        await self._waiter


class DirectCycle:
    """One request with its whole body, queued by ``IngestFastPath.start_now`` or run
    through the ASGI app; one write answers it.

    It has the attributes uvicorn's protocol reads on its ``cycle`` (``response_complete``,
    ``disconnected``, ``keep_alive``, ``message_event``) and behaves as uvicorn's
    ``RequestResponseCycle`` does for them.
    """

    __slots__ = ("_accepted", "_body", "_chunks", "_headers", "_now", "_protocol", "_status",
                 "disconnected", "keep_alive", "message_event", "response_complete",
                 "response_started", "scope")

    def __init__(self, protocol: Any, scope: dict[str, Any], keep_alive: bool,
                 now: NowIngest | None = None) -> None:
        self._protocol = protocol
        self.scope = scope
        self.keep_alive = keep_alive
        self._now = now
        self._accepted: Accepted | None = None
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self.message_event = _Disconnect()
        self._chunks: list[bytes] = []
        self._body: bytes | None = None
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []

    def add_body(self, chunk: bytes) -> None:
        self._chunks.append(chunk)

    def start(self) -> None:
        """The body is complete: queue its events at once when ``IngestFastPath.start_now``
        can, and answer when they are committed; else run the app in a task that uvicorn's
        shutdown waits for."""
        chunks = self._chunks
        body = self._body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        now = self._now
        if now is not None:
            runtime = now.target.runtime()
            client = self.scope.get("client")
            accepted = None if runtime is None else now.target.fast.start_now(
                runtime, now.simulation_id, now.authorization, client[0] if client else None,
                body, now.seen)
            if accepted is not None:
                self._accepted = accepted
                accepted.stored.add_done_callback(self._committed)
                return
        self._spawn(self._run(self._protocol.app))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        protocol = self._protocol
        task = protocol.loop.create_task(coro)
        task.add_done_callback(protocol.tasks.discard)
        protocol.tasks.add(task)

    def _committed(self, stored: asyncio.Future[list[StoredEvent]]) -> None:
        """The events ``start`` queued are committed (or refused): answer as ``send``
        would have answered the app's response."""
        accepted = self._accepted
        assert accepted is not None
        self._accepted = None
        if self.disconnected:
            return
        failure = (asyncio.CancelledError() if stored.cancelled()  # (nothing cancels it)
                   else stored.exception())
        if failure is None:
            try:
                body = accepted.created()
            except Exception as exc:
                failure = exc
        if failure is not None:  # answered as the app answers it, in a task
            self._spawn(self._fail(failure))
            return
        self.response_started = True
        self._status = 201
        self._headers = [(b"content-length", b"%d" % len(body)), *CREATED_HEADERS]
        if self._protocol.flow.write_paused:
            self._spawn(self._write_when_drained(body))
        else:
            self._write(body)

    async def _fail(self, exc: BaseException) -> None:
        try:
            await answer_failure(self.scope, self.send, exc)
        except BaseException as error:  # as ``_run`` does for the app
            log.error("Exception in ASGI application\n", exc_info=error)
            if not self.response_started:
                self._write_internal_error()
            else:
                self._protocol.transport.close()

    async def _write_when_drained(self, body: bytes) -> None:
        await self._protocol.flow.drain()
        self._write(body)

    async def _run(self, app: Any) -> None:
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            log.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                self._write_internal_error()
            else:
                self._protocol.transport.close()
        else:
            if not self.response_complete and not self.disconnected:
                log.error("ASGI callable returned without %s response.",
                          "completing" if self.response_started else "starting")
                if not self.response_started:
                    self._write_internal_error()
                else:
                    self._protocol.transport.close()

    async def receive(self) -> Message:
        body = self._body
        if body is not None and not self.disconnected:
            self._body = None
            return {"type": "http.request", "body": body, "more_body": False}
        if not self.disconnected and not self.response_complete:
            await self.message_event.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got "
                                   f"'{kind}'.")
            self.response_started = True
            self._status = message["status"]
            self._headers = list(message.get("headers", ()))
            return
        if self.response_complete or kind != "http.response.body":
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent.")
        self._chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"".join(self._chunks)
        self._chunks = []
        if self._protocol.flow.write_paused:
            await self._protocol.flow.drain()
        self._write(body)

    def _write(self, body: bytes) -> None:
        """Write the response (status and headers as the app started it) and complete."""
        protocol = self._protocol
        head = self._head(len(body))
        if protocol.access_log and protocol.access_logger.isEnabledFor(logging.INFO):
            scope: Any = self.scope
            protocol.access_logger.info(
                '%s - "%s %s HTTP/%s" %d', get_client_addr(scope), scope["method"],
                get_path_with_query_string(scope), scope["http_version"], self._status)
        if not protocol.transport.is_closing():
            protocol.transport.write(head + body)
        self._complete()

    def _head(self, length: int) -> bytes:
        """``_build_head``'s answer, remembered while uvicorn's default headers (the date)
        stay the same list: most answers repeat one of a few heads."""
        defaults = self._protocol.server_state.default_headers
        if _HEADS_FOR[0] is not defaults or len(_HEADS) > 256:
            _HEADS.clear()
            _HEADS_FOR[0] = defaults
        key = (self._status, tuple(self._headers), self.keep_alive, length)
        try:
            known = _HEADS.get(key)
        except TypeError:  # headers as lists (ASGI allows any iterable): not remembered
            return self._build_head(length)
        if known is None:
            head = self._build_head(length)
            _HEADS[key] = (head, not self.keep_alive)
            return head
        if known[1]:
            self.keep_alive = False
        return known[0]

    def _build_head(self, length: int) -> bytes:
        """Status line and headers as uvicorn writes them; a body's own length is checked
        against its ``Content-Length`` (or becomes it, instead of chunked encoding)."""
        content = [STATUS_LINE[self._status]]
        declared: int | None = None
        close = False
        for name, value in (*self._protocol.server_state.default_headers, *self._headers):
            if HEADER_RE.search(name):
                raise RuntimeError("Invalid HTTP header name.")
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            name = name.lower()
            if name == b"content-length":
                declared = int(value.decode())
            elif name == b"connection" and b"close" in [
                token.lower().strip() for token in value.split(b",")
            ]:
                close = True
            content += (name, b": ", value, b"\r\n")
        if declared is None:
            content.append(b"content-length: %d\r\n" % length)
        elif declared != length:
            raise RuntimeError(f"Response content length {length} differs from the "
                               f"Content-Length {declared}")
        if close:
            self.keep_alive = False
        elif not self.keep_alive:
            content.append(b"connection: close\r\n")
        content.append(b"\r\n")
        return b"".join(content)

    def _write_internal_error(self) -> None:
        protocol = self._protocol
        if not protocol.transport.is_closing():
            status, rest = _INTERNAL_ERROR
            default = b"".join(b"%s: %s\r\n" % pair
                               for pair in protocol.server_state.default_headers)
            protocol.transport.write(status + default + rest)
        self.keep_alive = False
        self._complete()

    def _complete(self) -> None:
        self.response_complete = True
        self.message_event.set()
        protocol = self._protocol
        if not self.keep_alive:
            protocol.transport.close()
        protocol.on_response_complete()


def ingest_http_protocol(max_body_bytes: int, bounds: HttpBounds, *,
                         direct: bool = True) -> type[Any] | str:
    """The protocol class for uvicorn's ``http=``, every connection under ``bounds``
    (api/http_guard.py): with ``direct``, ingest requests of at most ``max_body_bytes``
    take ``DirectCycle``; without it, every request takes uvicorn's own cycle."""
    if not HAVE_HTTPTOOLS:  # pragma: no cover - httptools is a pinned dependency
        return "auto"
    if not direct:
        return guarded(OrderedUpgrade, bounds)

    # Per loaded app (each ``serve`` has one; tests start several): its ``NowTarget``.
    _TARGETS: dict[int, tuple[Any, NowTarget | None]] = {}

    class IngestHttpProtocol(OrderedUpgrade):
        """uvicorn's httptools protocol; plain ingest requests are run by ``DirectCycle``.

        ``_direct`` says whether the request being parsed is one: ``self.cycle`` may still
        be the ``DirectCycle`` of an earlier request (an upgrade makes no new cycle), whose
        body and start must never be taken for this request's. A websocket upgrade that
        arrives while earlier requests are being answered (a ``DirectCycle`` or uvicorn's
        own, and those pipelined) waits for their answers (``OrderedUpgrade``), so they
        come before the 101, in request order, and never inside the stream.
        """

        _direct = False
        _seen: SeenCredentials | None = None

        def on_headers_complete(self) -> None:
            scope = self._direct_scope()
            self._direct = scope is not None
            if scope is None:
                super().on_headers_complete()
                return
            http_version = self.parser.get_http_version()
            keep_alive = http_version != "1.0" and self.parser.should_keep_alive()
            # Duck-typed: the protocol reads only what DirectCycle has (see its docstring).
            self.cycle = DirectCycle(self, scope, keep_alive,  # type: ignore[assignment]
                                     self._now)

        def _direct_scope(self) -> dict[str, Any] | None:
            """The request's scope when ``DirectCycle`` may run it, else None; ``_now`` is
            set when ``IngestFastPath.start_now`` may try it first."""
            if (self.parser.get_method() != b"POST" or self.expect_100_continue
                    or self.limit_concurrency is not None or self.parser.should_upgrade()
                    or (self.cycle is not None and not self.cycle.response_complete)):
                return None
            url = self.url
            if url[:1] == b"/" and b"?" not in url and b"#" not in url:
                raw_path, query = url, b""  # what parse_url would find, for less
            else:
                parsed_url = httptools.parse_url(url)
                raw_path, query = parsed_url.path, parsed_url.query or b""
            if b"%" in raw_path:
                return None
            match = INGEST_PATH.fullmatch(raw_path.decode("ascii"))
            if match is None:
                return None
            length = None
            authorization: bytes | None = None
            forwarded = False
            typed = foreign = False
            for name, value in self.headers:
                if name == b"content-length":
                    if length is not None or not value.isdigit():
                        return None
                    length = int(value)
                elif name == b"transfer-encoding":
                    return None
                elif name == b"authorization":
                    if authorization is None:
                        authorization = value
                elif name in _FORWARDED:
                    forwarded = True
                elif name == b"content-type":
                    typed = is_json_type(value)
                elif name == b"origin":
                    foreign = True
            # A body not labelled JSON, or a page's request: the full path decides
            # (api/crosssite.py).
            if length is None or length > max_body_bytes or not typed or foreign:
                return None
            self._now = None
            if not forwarded and not query and not self.root_path:
                target = self._now_target()
                simulation_id = int(match[1])
                if target is not None and simulation_id <= INT64_MAX:
                    if self._seen is None:
                        self._seen = SeenCredentials()
                    self._now = NowIngest(
                        target, simulation_id,
                        None if authorization is None else authorization.decode("latin-1"),
                        self._seen)
            scope = cast(dict[str, Any], self.scope)
            scope["method"] = "POST"
            http_version = self.parser.get_http_version()
            if http_version != "1.1":
                scope["http_version"] = http_version
            path = raw_path.decode("ascii")
            scope["path"] = self.root_path + path
            scope["raw_path"] = self.root_path.encode("ascii") + raw_path
            scope["query_string"] = query
            return scope

        def _now_target(self) -> NowTarget | None:
            """The ``IngestFastPath`` of the app under uvicorn's proxy-headers middleware,
            when that is all ``self.app`` is; None otherwise (another wrapper decides)."""
            app = self.app
            known = _TARGETS.get(id(app))
            if known is not None and known[0] is app:
                return known[1]
            inner = app.app if type(app) is ProxyHeadersMiddleware else app
            fast = getattr(inner, "fast_ingest", None)
            target = NowTarget(fast, inner) if isinstance(fast, IngestFastPath) else None
            _TARGETS[id(app)] = (app, target)
            return target

        def on_body(self, body: bytes) -> None:
            if self._direct and isinstance(self.cycle, DirectCycle):
                self.cycle.add_body(body)
            else:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self._direct and isinstance(self.cycle, DirectCycle):
                self._direct = False
                self.cycle.start()
            else:
                super().on_message_complete()

    return guarded(IngestHttpProtocol, bounds)


__all__ = ["DirectCycle", "ingest_http_protocol"]
