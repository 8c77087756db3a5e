"""Error responses: every failure becomes ``{"error": {"code", "message", "details"}}``.

Also the two guards at the edge: ``BodyGuard`` refuses an oversized body with 413 before
reading it whole and a body that breaks the JSON limits (depth, string length, 64-bit
integers) with 400, before any handler sees it; ``UnexpectedErrors`` turns any exception
that escapes a handler into one well-formed 500 with a request id, logged with its
traceback, and keeps the keep-alive connection usable.
"""

from __future__ import annotations

import logging
import math
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import BadRequest, NotFound, PayloadTooLarge, RidecastError
from ..metrics import INGEST_REJECTED
from .jsondecode import DecodeError, decode
from .jsonlimits import NUL_CHARACTER, JsonLimits

log = logging.getLogger(__name__)
_MISSING = object()


def error_response(exc: RidecastError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(exc.to_body(), status_code=exc.http_status, headers=headers)


def ridecast_error_response(exc: RidecastError, path: str, method: str) -> JSONResponse:
    """The answer to a ``RidecastError`` raised while serving ``method path``."""
    if path.endswith("/events") and method == "POST":
        INGEST_REJECTED.labels(exc.code).inc()
    headers: dict[str, str] = {}
    if exc.http_status == 401:
        # Not Basic: that challenge makes a browser ask for the credentials and then attach
        # them to every request to this server, a page of another site's included.
        headers["WWW-Authenticate"] = 'Token realm="ridecast"'
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
    return error_response(exc, headers or None)


def _loc(loc: tuple[Any, ...]) -> str:
    # FastAPI prefixes the source ("body", "query", "path"); keep it, it tells where to look.
    return ".".join(str(part) for part in loc)


def _from_request_validation(exc: RequestValidationError) -> RidecastError:
    errors = exc.errors()
    for err in errors:
        if err.get("type") == "json_invalid":
            reason = (err.get("ctx") or {}).get("error")
            return BadRequest("the request body is not valid JSON"
                              + (f": {reason}" if reason else ""), code="invalid_json")
    details = [
        {"field": _loc(tuple(err.get("loc", ()))), "message": err.get("msg", ""),
         "type": err.get("type", "")}
        for err in errors
    ]
    # docs/errors.md keeps the two apart: a wrong query parameter is ``invalid_query``, a
    # wrong body (or path id) ``validation_error``; a request wrong in both gets the latter.
    if errors and all(tuple(err.get("loc", ()))[:1] == ("query",) for err in errors):
        names = ", ".join(str(detail["field"]).removeprefix("query.") for detail in details)
        return BadRequest(f"invalid query parameter(s): {names}", code="invalid_query",
                          details=details)
    unknown = [str(detail["field"]).removeprefix("body.") for detail in details
               if detail["type"] == "extra_forbidden"]
    if unknown and len(unknown) == len(details):
        # Named in the message: a client that sent a setting here learns where it belongs.
        return BadRequest(f"unknown field(s) in the request body: {', '.join(unknown)}",
                          details=details)
    return BadRequest(f"{len(details)} invalid field(s) in the request", details=details)


def install_error_handlers(app: FastAPI) -> None:
    """Map ridecast, validation, routing and unexpected errors to the one error body."""

    @app.exception_handler(RidecastError)
    async def _ridecast(request: Request, exc: RidecastError) -> Response:
        return ridecast_error_response(exc, request.url.path, request.method)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> Response:
        return error_response(_from_request_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return error_response(NotFound("no such endpoint"))
        if exc.status_code == 405:
            return error_response(
                RidecastError("method not allowed on this path", code="method_not_allowed"),
                {"Allow": ", ".join(_allowed_methods(request))},
            )
        body = {"error": {"code": f"http_{exc.status_code}", "message": str(exc.detail),
                          "details": []}}
        return JSONResponse(body, status_code=exc.status_code)



def _allowed_methods(request: Request) -> list[str]:
    """Every method some route takes on this path (a route holds one method here)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


async def answer_unexpected(scope: Scope, receive: Receive, send: Send,
                            response_started: bool) -> bool:
    """Log the exception being handled (call it in an ``except`` block) with a request id
    and answer one 500 carrying that id; False when the response is already half sent,
    so nothing well-formed can follow (the caller re-raises)."""
    request_id = uuid.uuid4().hex
    log.exception("unhandled error in %s %s (request_id %s)", scope.get("method"),
                  scope.get("path"), request_id)
    if response_started:
        return False
    error = RidecastError(
        f"internal error; it has been logged with request_id {request_id}",
        details=[{"request_id": request_id}],
    )
    await error_response(error, {"X-Request-Id": request_id})(scope, receive, send)
    return True


class UnexpectedErrors:
    """ASGI middleware: an exception that escapes a handler becomes one 500, not a reset.

    Starlette's own catch-all answers and then re-raises, and the server then drops the
    keep-alive connection; here the error is logged with its traceback and a request id,
    the client gets our error body with that id, and the connection stays usable.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            if not await answer_unexpected(scope, receive, send, started):
                raise


def too_large(max_bytes: int) -> PayloadTooLarge:
    """The 413 for a body over ``max_bytes`` (``RIDECAST_MAX_BODY_BYTES``)."""
    return PayloadTooLarge(
        f"the request body exceeds {max_bytes} bytes (RIDECAST_MAX_BODY_BYTES)",
        details=[{"max_bytes": max_bytes}],
    )


async def read_body(scope: Scope, receive: Receive, max_bytes: int) -> bytes | RidecastError | None:
    """The whole request body; a 413 error over ``max_bytes``; None if the client left.

    A declared ``Content-Length`` over the limit is refused before anything is read.
    Bodies are small (the limit is about a MiB), so they are read whole at the edge:
    FastAPI would turn an error raised mid-read into a generic 400.
    """
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                declared = 0
            if declared > max_bytes:
                return too_large(max_bytes)
    chunks: list[bytes] = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        received += len(chunk)
        if received > max_bytes:
            return too_large(max_bytes)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` for an app downstream of one that read ``body`` whole: the body first."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def parse_json_body(body: bytes, limits: JsonLimits) -> tuple[Any, RidecastError | None]:
    """``body`` parsed by the one strict decoder (``jsondecode``), checked against ``limits``.

    Returns ``(parsed, None)``; ``(_MISSING, error)`` when it breaks a limit; and
    ``(_MISSING, None)`` when it is not strict JSON (the handler, decoding it with the same
    decoder, says so precisely). Every route parses alike, so all see the same integers.
    """
    try:
        parsed, violation = decode(body, limits)
    except DecodeError:
        return _MISSING, None
    if violation is None:
        return parsed, None
    field = "body" + ("" if violation.field[:1] in ("", "[") else ".") + violation.field
    if violation.reason == NUL_CHARACTER:
        return _MISSING, BadRequest(f"{field}: {violation.reason}", code="unsupported_character",
                                    details=[{"field": field, "message": violation.reason}])
    return _MISSING, BadRequest(
        f"{field}: {violation.reason} (limits: RIDECAST_MAX_JSON_DEPTH, "
        "RIDECAST_MAX_JSON_STRING, RIDECAST_MAX_JSON_ITEMS; integers are 64-bit)",
        code="json_limit_exceeded",
        details=[{"field": field, "message": violation.reason}],
    )


def is_missing(value: Any) -> bool:
    """True for ``parse_json_body``'s "no parsed value"."""
    return value is _MISSING


class BodyGuard:
    """ASGI middleware: a body over ``max_bytes`` gets 413, one breaking ``limits`` 400.

    Either way it never reaches a handler, so nothing is stored. The parsed JSON is kept in
    ``scope["state"]["json_body"]`` so that ``deps.json_body`` does not parse it again.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, limits: JsonLimits | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.limits = limits or JsonLimits()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await read_body(scope, receive, self.max_bytes)
        if body is None:
            return
        if isinstance(body, RidecastError):
            await error_response(body)(scope, receive, send)
            return
        if body:
            parsed, refused = parse_json_body(body, self.limits)
            if refused is not None:
                await error_response(refused)(scope, receive, send)
                return
            if parsed is not _MISSING:
                scope.setdefault("state", {})["json_body"] = parsed
        await self.app(scope, replaying(body, receive), send)
