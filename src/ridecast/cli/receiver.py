"""``ridecast receiver``: a local HTTP server that accepts any request and logs it.

The test receiver the interface suggests: point ``messaging_webhook_url`` at it and watch
what ridecast sends. One block per request (method, URL, headers, body pretty-printed), or
one JSON line per request with ``--json``; ``--fail-rate 0.3`` answers 500 to a random 30 %
of requests so that retries can be watched; ``--secret whsec_...`` verifies each request's
Standard Webhooks signature (a bad one is answered 401); ``--forward URL`` relays each request
to your own endpoint and answers with what it answered.

``Receiver`` (asyncio) and ``ReceiverThread`` (the same in a background thread) are also what
the tests and ``bench/webhooks.py`` use: a small, fast HTTP/1.1 server with keep-alive.

It is bounded like a server facing strangers: a head over ``MAX_HEADER_BYTES`` closes the
connection; a body over ``MAX_BODY_BYTES`` is answered 413 and the connection closed,
whether it is sent with ``Content-Length`` or chunked (counted as the chunks arrive, never
held past the bound); a request's head must arrive within ``HEAD_TIMEOUT_S`` (``--timeout``)
of the connection or of the previous answer, so an idle or slowloris connection is closed,
and its body within as long again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

import typer

# httpx and the event package (pydantic models) are imported where they are used, so
# ``receiver --help`` needs neither.
from .netcheck import port_free

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_CHUNKS = 65_536
"""Chunks of one chunked body: each costs a parse whatever its size, so a sender of
1-byte chunks is stopped (413) after a bounded amount of work, not at ``MAX_BODY_BYTES``."""
HEAD_TIMEOUT_S = 60.0
LINGER_S = 2.0
FORWARD_TIMEOUT_S = 10.0

_TOO_LARGE = (b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n"
              b"connection: close\r\n\r\n")


class BodyTooLarge(ValueError):
    """A request body over ``MAX_BODY_BYTES`` (declared or chunked): answered 413."""


@dataclass
class Request:
    """One request as received."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    received_at: float = field(default_factory=time.time)

    def json(self) -> object:
        return json.loads(self.body)


@dataclass
class Reply:
    """What the receiver answers."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


Handler = Callable[[Request], Reply | Awaitable[Reply]]

_REASONS = {200: "OK", 204: "No Content", 302: "Found", 410: "Gone", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}


class Receiver:
    """An HTTP/1.1 server on ``host:port`` (0: a free port) calling ``handler`` per request."""

    def __init__(self, handler: Handler | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, timeout_s: float = HEAD_TIMEOUT_S) -> None:
        self.handler: Handler = handler or (lambda _req: Reply())
        self.timeout_s = timeout_s  # for a request's head, then for its body
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port,
                                                  limit=MAX_HEADER_BYTES)
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            tasks = list(self._conns)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
            await asyncio.sleep(0)  # let the closed transports finish closing

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                try:
                    request = await _read_request(reader, self.timeout_s)
                except BodyTooLarge:
                    writer.write(_TOO_LARGE)
                    await writer.drain()
                    await _linger(reader, writer)
                    return
                if request is None:
                    return
                reply = self.handler(request)
                if not isinstance(reply, Reply):
                    reply = await reply
                if reply.delay_s:
                    await asyncio.sleep(reply.delay_s)
                head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}",
                        f"content-length: {len(reply.body)}"]
                head += [f"{k}: {v}" for k, v in reply.headers.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + reply.body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError, TimeoutError):
            return
        except asyncio.CancelledError:
            return
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """End the writes and drop what the client still sends, for a moment, before the
    close: closing with its bytes unread would reset the connection and could lose the
    answer just written."""
    if not writer.can_write_eof():
        return
    writer.write_eof()
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(LINGER_S):
            while await reader.read(65536):
                pass


async def _read_request(reader: asyncio.StreamReader,
                        timeout_s: float = HEAD_TIMEOUT_S) -> Request | None:
    """The next request; None at a clean end; ``TimeoutError`` when its head, or then its
    body, takes over ``timeout_s``; ``BodyTooLarge`` over ``MAX_BODY_BYTES``."""
    try:
        async with asyncio.timeout(timeout_s):
            head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    async with asyncio.timeout(timeout_s):
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _read_chunked(reader)
        else:
            length = int(headers.get("content-length", "0"))
            if length > MAX_BODY_BYTES:
                raise BodyTooLarge(length)
            body = await reader.readexactly(length) if length > 0 else b""
    return Request(method, target, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body, refused as soon as its chunks pass ``MAX_BODY_BYTES`` (their size
    lines and extensions counted too) or ``MAX_CHUNKS``."""
    chunks: list[bytes] = []
    received = 0
    while True:
        if len(chunks) >= MAX_CHUNKS:
            raise BodyTooLarge(received)
        line = await reader.readuntil(b"\r\n")
        received += len(line)
        size = int(line.split(b";")[0], 16)
        if size < 0:
            raise ValueError("negative chunk size")
        if size == 0:
            await _skip_trailers(reader)
            return b"".join(chunks)
        received += size
        if received > MAX_BODY_BYTES:
            raise BodyTooLarge(received)
        chunk = await reader.readexactly(size + 2)
        chunks.append(chunk[:-2])


async def _skip_trailers(reader: asyncio.StreamReader) -> None:
    """Read the trailer fields after the last chunk, up to the empty line that ends the
    body (RFC 9112 section 7.1.2), so a keep-alive connection's next request starts where
    it should. They count against ``MAX_HEADER_BYTES`` like a head."""
    seen = 0
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        seen += len(line)
        if seen > MAX_HEADER_BYTES:
            raise ValueError("trailer fields over MAX_HEADER_BYTES")


class ReceiverThread:
    """A ``Receiver`` running in a background thread (for synchronous tests and benches)."""

    def __init__(self, handler: Handler | None = None, *, port: int = 0) -> None:
        self.receiver = Receiver(handler, port=port)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self.receiver.start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.receiver.close())
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def start(self) -> ReceiverThread:
        self._thread.start()
        self._ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return self.receiver.url

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> ReceiverThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def format_request(request: Request, *, as_json: bool,
                   notes: dict[str, str] | None = None) -> str:
    """The log line (``--json``) or pretty block of one request."""
    try:
        parsed: object = json.loads(request.body) if request.body else None
        text = json.dumps(parsed, indent=2, ensure_ascii=False) if parsed is not None else ""
    except ValueError:
        parsed = None
        text = request.body.decode("utf-8", errors="replace")
    if as_json:
        line: dict[str, object] = {
            "time": request.received_at, "method": request.method, "url": request.target,
            "headers": request.headers,
        }
        line.update(notes or {})
        if parsed is not None:
            line["body"] = parsed
        else:
            line["body_base64"] = base64.b64encode(request.body).decode()
        return json.dumps(line, ensure_ascii=False)
    stamp = time.strftime("%H:%M:%S", time.localtime(request.received_at))
    block = [f"── {stamp} {request.method} {request.target}"]
    block += [f"{name}: {value}" for name, value in request.headers.items()]
    block += ["", text]
    block += [f"→ {name}: {value}" for name, value in (notes or {}).items()]
    return "\n".join([*block, ""])


def check_signature(secret: str | None, request: Request) -> str | None:
    """None when the request is correctly signed (or no secret is set), else the reason."""
    if secret is None:
        return None
    from ..events.signing import SignatureError, verify

    try:
        verify(secret, request.headers, request.body)
    except SignatureError as exc:
        return str(exc)
    return None


def forward_headers(request: Request) -> dict[str, str]:
    """The headers to pass on: all but those that describe this hop."""
    return {name: value for name, value in request.headers.items() if name not in HOP_HEADERS}


HOP_HEADERS = frozenset({"host", "content-length", "connection", "keep-alive",
                         "transfer-encoding", "te", "upgrade", "proxy-connection"})


def check_forward_url(value: str | None) -> str | None:
    if value is None:
        return None
    import httpx

    try:
        host = httpx.URL(value).host if value.startswith(("http://", "https://")) else ""
    except httpx.InvalidURL:
        host = ""
    if not host:
        raise typer.BadParameter(f"{value!r} is not an http:// or https:// URL")
    return value


def check_secret(value: str | None) -> str | None:
    if value is None:
        return None
    from ..events.signing import secret_key

    try:
        secret_key(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def receiver(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 9000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    json_lines: Annotated[bool, typer.Option("--json", help="One JSON line per request.")] = False,
    fail_rate: Annotated[float, typer.Option(min=0.0, max=1.0,
                                             help="Share of requests answered 500.")] = 0.0,
    seed: Annotated[int | None, typer.Option(help="Seed of the --fail-rate draws.")] = None,
    secret: Annotated[str | None, typer.Option(
        "--secret", callback=check_secret, show_default=False,
        help="Verify Standard Webhooks signatures with this whsec_ secret; a request that "
             "fails is answered 401 (and not forwarded).")] = None,
    forward: Annotated[str | None, typer.Option(
        "--forward", callback=check_forward_url, show_default=False,
        help="Pass each request on to this URL and answer with its status and body "
             "(502 when it cannot be reached).")] = None,
    timeout: Annotated[float, typer.Option(
        min=0.1, help="Seconds a request's head may take to arrive (from the connection or "
                      "the previous answer), and then its body; slower connections are "
                      "closed.")] = HEAD_TIMEOUT_S,
) -> None:
    """Run a local webhook receiver that logs every request (method, URL, headers, body).

    With --secret it checks each request's webhook-signature; with --forward it relays the
    requests to your own endpoint, so you can watch them on the way.
    """
    import httpx

    rng = random.Random(seed)
    client = httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S) if forward else None

    async def relay(request: Request) -> tuple[Reply, str]:
        assert client is not None and forward is not None
        try:
            response = await client.request(request.method, forward, content=request.body,
                                            headers=forward_headers(request))
        except httpx.HTTPError as exc:
            return (Reply(502, b'{"error":"forward target unreachable"}'),
                    f"forward to {forward} failed: {type(exc).__name__}: {exc}")
        return (Reply(response.status_code, response.content),
                f"forwarded to {forward}: {response.status_code}")

    async def handle(request: Request) -> Reply:
        notes: dict[str, str] = {}
        problem = check_signature(secret, request)
        if secret is not None:
            notes["signature"] = "valid" if problem is None else f"invalid: {problem}"
        if problem is not None:
            reply = Reply(401, b'{"error":"invalid webhook signature"}')
        elif rng.random() < fail_rate:
            reply = Reply(500, b'{"error":"simulated failure"}')
            notes["answer"] = "answered 500 (--fail-rate)"
        elif forward is not None:
            reply, notes["forward"] = await relay(request)
        else:
            reply = Reply(204)
        print(format_request(request, as_json=json_lines, notes=notes), flush=True)
        return reply

    if not port_free(host, port):
        print(f"ridecast receiver: {host}:{port} is in use; stop what listens there or pick "
              "another port with --port", file=sys.stderr)
        raise typer.Exit(1)

    async def run() -> None:
        server = Receiver(handle, host=host, port=port, timeout_s=timeout)
        await server.start()
        extra = "".join((", verifying signatures" if secret else "",
                         f", forwarding to {forward}" if forward else ""))
        print(f"ridecast receiver listening on {server.url}{extra}", file=sys.stderr,
              flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await server.close()
            if client is not None:
                await client.aclose()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
