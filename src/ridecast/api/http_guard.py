"""Bounds on an HTTP connection before any request reaches the app: head size and time.

uvicorn's httptools protocol sets no limit on the size of a request's line and headers (the
parser buffers a 64 MB header whole) and no timer on a connection that has not yet sent a
request: a connection that sends nothing, or headers that never end, is held for ever.
``HttpGuard`` sits in front of that protocol (and of ``IngestHttpProtocol``, which extends
it) and adds four bounds, each a setting:

- ``RIDECAST_MAX_HEADER_BYTES``: a request whose line and headers pass it is answered
  431 ``headers_too_large`` and the connection closed; the parser never holds more than
  the limit and one read (at most 256 KiB) of a head;
- ``RIDECAST_HTTP_HEADER_TIMEOUT_S``: from the first byte of a request to the end of its
  headers; a head not complete by then closes the connection (a slowloris);
- ``RIDECAST_HTTP_IDLE_TIMEOUT_S``: a connection with no request in progress, new or kept
  alive, that begins none within this time is closed (uvicorn's keep-alive timer is set to
  the same value; stray bytes that begin no request do not rearm either).

- ``RIDECAST_HTTP_BODY_TIMEOUT_S``: from the end of a request's headers to the end of its
  body (bounded in bytes by ``RIDECAST_MAX_BODY_BYTES``); a body that stalls closes the
  connection.

Once a request is whole, the time its answer takes is the application's.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ..errors import RidecastError


@dataclass(frozen=True, slots=True)
class HttpBounds:
    """The connection bounds (see the module docstring)."""

    max_header_bytes: int = 65536
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 5.0
    body_timeout_s: float = 60.0


def headers_too_large(max_bytes: int) -> RidecastError:
    """The 431 for a request line and headers over ``max_bytes``."""
    return RidecastError(
        f"the request line and headers exceed {max_bytes} bytes (RIDECAST_MAX_HEADER_BYTES)",
        code="headers_too_large", details=[{"max_bytes": max_bytes}],
    )


class HttpGuard(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of ``bounds`` (set by ``guarded``).

    Requests are counted from their first byte (``on_message_begin``) to their response
    (``on_response_complete``); the connection is idle when none is open.
    """

    bounds = HttpBounds()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # One deadline at a time (None: none), and one timer that may fire before it: each
        # request moves the deadline three times, and moving a float costs less than
        # cancelling and scheduling a timer, which this did three times per request. The
        # timer, when it fires early, waits again for what is left (``_expired``).
        self._deadline: float | None = None
        self._guard_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._in_head = False
        self._open_requests = 0
        self._discarding = False

    def _arm(self, delay: float) -> None:
        """Close the connection ``delay`` seconds from now unless re-armed or disarmed."""
        deadline = self._deadline = self.loop.time() + delay
        timer = self._guard_timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._guard_timer = self.loop.call_at(deadline, self._expired)

    def _disarm(self) -> None:
        self._deadline = None  # the timer, if any, fires and finds nothing to do

    def _expired(self) -> None:
        self._guard_timer = None
        deadline = self._deadline
        if deadline is None:
            return
        if self.loop.time() < deadline:  # moved since the timer was set: wait for it
            self._guard_timer = self.loop.call_at(deadline, self._expired)
            return
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.bounds.idle_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline = None
        if self._guard_timer is not None:
            self._guard_timer.cancel()
            self._guard_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """uvicorn's ``data_received``, with the head counted and refused when too large."""
        if self._discarding:
            return
        # Bytes that arrive outside a body belong to a request's head (or to none yet).
        if not self._open_requests or self._in_head:
            self._head_bytes += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HeadRefused):
                return  # answered 431 and closed
            self._bad_request()
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if (self._in_head and self._head_bytes > self.bounds.max_header_bytes
                and not self.transport.is_closing()):
            self._refuse_head()

    def handle_websocket_upgrade(self) -> None:
        super().handle_websocket_upgrade()
        if self.transport.get_protocol() is not self:  # upgraded, not put off
            # The connection is the stream's now. Nothing may keep this protocol alive: the
            # guard's timer would until it fired, and the parser, which calls back into this
            # protocol, makes a cycle that only a full garbage collection would free.
            self._deadline = None
            if self._guard_timer is not None:
                self._guard_timer.cancel()
                self._guard_timer = None
            del self.parser

    def _bad_request(self) -> None:
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        self.send_400_response(msg)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._open_requests += 1
        self._in_head = True
        self._arm(self.bounds.header_timeout_s)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm()
        # A head that ends within the read that took it past the limit: the parser's own
        # count (url and headers) decides, and the parse stops here.
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.bounds.max_header_bytes:
            self._refuse_head()
            raise _HeadRefused
        super().on_headers_complete()
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            self._arm(self.bounds.body_timeout_s)  # until on_message_complete

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._open_requests = max(0, self._open_requests - 1)
        super().on_response_complete()
        if not self._open_requests and not self.transport.is_closing():
            self._head_bytes = 0
            self._arm(self.bounds.idle_timeout_s)

    def _refuse_head(self) -> None:
        """Answer 431 and close: nothing of this request reaches the app."""
        self._disarm()
        error = headers_too_large(self.bounds.max_header_bytes)
        body = orjson.dumps(error.to_body())
        head = [STATUS_LINE[431]]
        for name, value in self.server_state.default_headers:
            head += (name, b": ", value, b"\r\n")
        head += (b"content-type: application/json\r\ncontent-length: %d\r\n"
                 b"connection: close\r\n\r\n" % len(body),)
        self.transport.write(b"".join(head) + body)
        # Closing now, with the client's bytes unread, would reset the connection and the
        # client could lose the 431: end the writes, drop what still comes for a moment,
        # then close (a "lingering close"). TLS cannot half-close: it closes at once.
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._discarding = True
        self._arm(LINGER_S)


LINGER_S = 2.0
"""How long a connection refused with 431 is read (and dropped) before it is closed."""


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a request answered 431."""


def guarded(base: type[Any], bounds: HttpBounds) -> type[Any]:
    """``base`` (uvicorn's httptools protocol or a subclass) under ``HttpGuard``'s bounds."""
    if base is HttpToolsProtocol:
        return type("GuardedHttpProtocol", (HttpGuard,), {"bounds": bounds})
    return type(f"Guarded{base.__name__}", (HttpGuard, base), {"bounds": bounds})


__all__ = ["HttpBounds", "HttpGuard", "guarded", "headers_too_large"]
