"""Error responses: every failure becomes ``{"error": {"code", "message", "details"}}``.

Also the body-size guard, which refuses an oversized body with 413 before reading it whole.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import BadRequest, NotFound, PayloadTooLarge, RidecastError, ServiceUnavailable
from ..metrics import INGEST_REJECTED

log = logging.getLogger(__name__)


def error_response(exc: RidecastError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(exc.to_body(), status_code=exc.http_status, headers=headers)


def _loc(loc: tuple[Any, ...]) -> str:
    # FastAPI prefixes the source ("body", "query", "path"); keep it, it tells where to look.
    return ".".join(str(part) for part in loc)


def _from_request_validation(exc: RequestValidationError) -> RidecastError:
    errors = exc.errors()
    if any(err.get("type") == "json_invalid" for err in errors):
        return BadRequest("the request body is not valid JSON", code="invalid_json")
    details = [
        {"field": _loc(tuple(err.get("loc", ()))), "message": err.get("msg", ""),
         "type": err.get("type", "")}
        for err in errors
    ]
    return BadRequest(f"{len(details)} invalid field(s) in the request", details=details)


def install_error_handlers(app: FastAPI) -> None:
    """Map ridecast, validation, routing and unexpected errors to the one error body."""

    @app.exception_handler(RidecastError)
    async def _ridecast(request: Request, exc: RidecastError) -> Response:
        if request.url.path.endswith("/events") and request.method == "POST":
            INGEST_REJECTED.labels(exc.code).inc()
        headers = {"WWW-Authenticate": 'Basic realm="ridecast"'} if exc.http_status == 401 else None
        if isinstance(exc, ServiceUnavailable) and exc.retry_after_s is not None:
            headers = {"Retry-After": str(exc.retry_after_s)}
        return error_response(exc, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> Response:
        return error_response(_from_request_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return error_response(NotFound("no such endpoint"))
        if exc.status_code == 405:
            return error_response(
                RidecastError("method not allowed on this path", code="method_not_allowed")
            )
        body = {"error": {"code": f"http_{exc.status_code}", "message": str(exc.detail),
                          "details": []}}
        return JSONResponse(body, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return error_response(RidecastError("internal error; it has been logged"))


class BodySizeLimit:
    """ASGI middleware: a body over ``max_bytes`` gets 413 and never reaches a handler."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = PayloadTooLarge(
            f"the request body exceeds {self.max_bytes} bytes (RIDECAST_MAX_BODY_BYTES)",
            details=[{"max_bytes": self.max_bytes}],
        )
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await error_response(too_large)(scope, receive, send)
                    return
        # Bodies are small (the limit is about a MiB), so read it whole here: FastAPI would
        # turn an error raised mid-read into a generic 400.
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                await error_response(too_large)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body:
            scope = _as_json(scope)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


_NOT_JSON = (b"", b"application/x-www-form-urlencoded", b"text/plain")


def _as_json(scope: Scope) -> Scope:
    """Every ridecast body is JSON: read a body sent without a JSON content type as JSON.

    ``curl -d`` labels its body as a form; refusing it would only confuse.
    """
    headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-type"]
    given = dict(scope.get("headers", ())).get(b"content-type", b"")
    if given.split(b";")[0].strip().lower() not in _NOT_JSON:
        return scope
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
