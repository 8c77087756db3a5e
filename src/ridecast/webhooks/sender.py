"""One HTTP attempt of one delivery: resolve, check, connect to the checked address, POST.

The sender never raises for a failed attempt: every outcome (answer, refusal, DNS failure,
time-out, TLS or connection error, a request that cannot even be built) comes back as an
``Attempt``, ready for the delivery log
and for ``retry.verdict``. Low-level errors are translated here, where ridecast touches
the network.

Requests go to the checked IP address over keep-alive connections (``http11.Pool``), with
the ``Host`` header and the TLS server name set to the host name.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from .. import __version__
from ..events.signing import (
    HEADER_ID,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    secret_key,
    signature,
)
from ..store.text import storable
from .deadline import Deadline
from .http11 import ConnectFailed, NotSent, Pool, ProtocolError
from .resolver import ResolveError, Resolver
from .retry import ErrorClass, error_class_of_status, parse_retry_after
from .targets import InvalidTarget, Target, TargetRefused

USER_AGENT = f"ridecast/{__version__}"
# The first bytes of a receiver's answer kept in the delivery log. At most
# ``http11.MAX_DRAIN_BYTES`` of a body are read (to reuse the connection); a longer body is
# cut after these bytes and its connection closed. Documented in docs/webhooks.md.
RESPONSE_BODY_LIMIT = 1024
START_CACHE_MAX = 4096  # URLs whose request start is kept (emptied when full)


@dataclass(slots=True)  # not frozen: made per delivery (see jobs.Job)
class Attempt:
    """What one attempt did: for the log (``webhook_attempts``) and for the retry decision."""

    started_at: float
    latency_ms: float
    status_code: int | None = None
    error_class: ErrorClass | None = None
    error: str | None = None
    response_body: str | None = None
    retry_after_s: float | None = None
    # Not sent at all: ``start_by`` had passed when the request was to be written.
    not_sent: bool = False

    @property
    def ok(self) -> bool:
        return self.error_class is None


class Sender:
    """POSTs signed deliveries with keep-alive connection reuse; see the module docstring."""

    def __init__(
        self,
        *,
        timeout_s: float,
        connect_timeout_s: float,
        allow_private: bool,
        resolver: Resolver | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.resolver = resolver or Resolver(allow_private=allow_private)
        self._pool = Pool(connect_timeout_s=min(connect_timeout_s, timeout_s))
        # URL -> the request line and the headers that never change for it.
        self._starts: dict[str, str] = {}
        self._keys: dict[str, bytes] = {}  # secret -> HMAC key

    async def close(self) -> None:
        await self._pool.close()

    async def send(
        self, url: str, msg_id: str, body: bytes, secret: str | None,
        deadline: Deadline | None = None, start_by: float | None = None,
    ) -> Attempt:
        """One attempt to deliver ``body`` to ``url``; never raises for a failed attempt.

        ``deadline``: the calling task's one timer for its requests (a dispatcher unit sends
        many one after the other); without it, an ``asyncio.timeout`` for this request.
        ``start_by``: the request is written only until this wall-clock time, checked right
        before the write (``http11.Pool.post``); later, the attempt comes back ``not_sent``.
        """
        started = time.time()
        t0 = time.perf_counter()
        try:
            checked = self.resolver.checked(url)  # a busy endpoint: no coroutine, no lookup
            if checked is None:
                target, address = await self.resolver.resolve(url)
                checked = (target, str(address))
            target, address_text = checked
            request = self._request(url, target, msg_id, body, secret, started)
        except TargetRefused as exc:
            refused = ErrorClass.OTHER if isinstance(exc, InvalidTarget) else (
                ErrorClass.BLOCKED_ADDRESS)
            return _failed(started, t0, refused, str(exc)[:500])
        except ResolveError as exc:
            return _failed(started, t0, ErrorClass.DNS, str(exc)[:500])
        except Exception as exc:
            # A request that cannot be built (a secret that is not base64, set before it
            # was checked): an attempt that failed, never an exception for the caller.
            return _failed(started, t0, ErrorClass.OTHER,
                           f"cannot build the request: {type(exc).__name__}: {exc}"[:500])
        try:
            if deadline is None:
                async with asyncio.timeout(self.timeout_s):
                    answer = await self._pool.post(
                        target.scheme, target.host, target.port, address_text, request,
                        RESPONSE_BODY_LIMIT, start_by,
                    )
            else:
                deadline.start(self.timeout_s)
                try:
                    answer = await self._pool.post(
                        target.scheme, target.host, target.port, address_text, request,
                        RESPONSE_BODY_LIMIT, start_by,
                    )
                except asyncio.CancelledError:
                    if not deadline.expired():
                        raise
                    raise TimeoutError from None
                finally:
                    deadline.stop()
        except NotSent as exc:
            attempt = _failed(started, t0, ErrorClass.OTHER, str(exc))
            attempt.not_sent = True
            return attempt
        except TimeoutError:
            return _failed(started, t0, ErrorClass.TIMEOUT,
                           f"no complete answer within {self.timeout_s} s")
        except ConnectFailed as exc:
            return _failed(started, t0, ErrorClass.TLS if exc.tls else ErrorClass.CONNECT,
                           str(exc)[:500])
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            return _failed(started, t0, ErrorClass.CONNECT,
                           f"connection lost: {type(exc).__name__}: {exc}"[:500])
        except ProtocolError as exc:
            return _failed(started, t0, ErrorClass.PROTOCOL, f"broken HTTP answer: {exc}"[:500])
        except Exception as exc:  # whatever else: a failed attempt, never the caller's error
            return _failed(started, t0, ErrorClass.OTHER, f"{type(exc).__name__}: {exc}"[:500])
        latency_ms = (time.perf_counter() - t0) * 1000.0
        status = answer.status
        error_class = error_class_of_status(status)
        retry_after = answer.headers.get("retry-after")
        return Attempt(
            started, latency_ms, status, error_class,
            None if error_class is None else f"HTTP {status}",
            # Decoding keeps a NUL, which PostgreSQL refuses (store/text.py).
            storable(answer.body.decode("utf-8", errors="replace")),
            None if retry_after is None else parse_retry_after(retry_after, time.time()),
        )

    def _request(self, url: str, target: Target, msg_id: str, body: bytes,
                 secret: str | None, started: float) -> bytes:
        """The request's bytes; raises what the secret makes impossible (``send`` turns it
        into an attempt). Every header is ASCII: ``parse_target`` encoded the URL."""
        start = self._starts.get(url)
        if start is None:
            if len(self._starts) >= START_CACHE_MAX:
                self._starts.clear()
            start = self._starts[url] = (f"POST {target.target} HTTP/1.1\r\n"
                                         f"host: {target.host_header}\r\n"
                                         "content-type: application/json\r\n"
                                         f"user-agent: {USER_AGENT}\r\n")
        timestamp = int(started)
        key = self.signing_key(secret) if secret else b""
        signed = (f"{HEADER_SIGNATURE}: {signature(key, msg_id, timestamp, body)}"
                  "\r\n" if secret else "")
        head = (f"{start}content-length: {len(body)}\r\n{HEADER_ID}: {msg_id}\r\n"
                f"{HEADER_TIMESTAMP}: {timestamp}\r\n{signed}\r\n")
        return head.encode("ascii") + body

    def signing_key(self, secret: str) -> bytes:
        """The HMAC key the deliveries are signed with; ValueError when ``secret`` cannot
        sign (not base64, or empty). The data check calls it when a secret is set."""
        key = self._key(secret)
        if not key:
            raise ValueError("the webhook secret holds no key")
        return key

    def _key(self, secret: str) -> bytes:
        """The HMAC key of ``secret``, decoded once per secret (bounded like the starts)."""
        key = self._keys.get(secret)
        if key is None:
            if len(self._keys) >= START_CACHE_MAX:
                self._keys.clear()
            key = self._keys[secret] = secret_key(secret)
        return key


def _failed(started: float, t0: float, error_class: ErrorClass, error: str) -> Attempt:
    """An attempt that got no HTTP answer."""
    return Attempt(started, (time.perf_counter() - t0) * 1000.0,
                   error_class=error_class, error=storable(error))


__all__ = ["USER_AGENT", "Attempt", "Sender"]
