"""The SDK's one exception tree, mapped from the server's error table.

Every error the SDK raises derives from ``ClientError``; httpx and websockets exceptions are
translated at the boundary and never reach the caller::

    ClientError
     ├── TransportError            the server could not be reached (connect, timeout, TLS)
     ├── APIError                  the server answered with an error body; .status, .code
     │    ├── BadRequestError      400 (validation_error, invalid_cursor, ...)
     │    ├── AuthenticationError  401 (not_authenticated, invalid_credentials, token_*)
     │    ├── PermissionDeniedError 403
     │    ├── NotFoundError        404 (simulation_not_found, not_found, ...)
     │    ├── ConflictError        409
     │    ├── GoneError            410 (cursor_expired)
     │    ├── PreconditionFailedError 412 (If-Match lost a race)
     │    ├── PayloadTooLargeError 413
     │    └── ServerError          5xx
     ├── StreamClosed              a stream ended on a close code that says "do not reconnect"
     │    ├── StreamAuthError      4001-4004: the token was refused even after a fresh one
     │    ├── StreamNotFound       4005-4007: unknown type, invisible simulation, bad path
     │    └── CursorExpired        4010: since= is past retention, the gap cannot be replayed
     └── WebhookVerificationError a webhook request's signature or timestamp does not check

Codes, HTTP statuses and close codes come from ``ridecast.errors.ERRORS`` (pure, shared with
the server), so a new server code maps to the right class without a change here.
"""

from __future__ import annotations

from typing import Any

from ..errors import ERRORS


class ClientError(Exception):
    """Base of every exception the ridecast SDK raises."""


class TransportError(ClientError):
    """Raised when the server cannot be reached or does not answer in time."""


class APIError(ClientError):
    """Raised when the server answers with an error; ``code`` is the stable error code."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str = "internal_error",
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []

    @property
    def description(self) -> str:
        """The error table's description of ``code`` (empty for an unknown code)."""
        spec = ERRORS.get(self.code)
        return spec.description if spec else ""


class BadRequestError(APIError):
    """Raised on 400: the request was malformed or failed validation."""


class AuthenticationError(APIError):
    """Raised on 401: missing or wrong credentials, or a refused token."""


class PermissionDeniedError(APIError):
    """Raised on 403: authenticated but not allowed."""


class NotFoundError(APIError):
    """Raised on 404: no such resource, or not visible to this user."""


class ConflictError(APIError):
    """Raised on 409: the operation conflicts with the current state."""


class GoneError(APIError):
    """Raised on 410: e.g. a cursor older than the retained history."""


class PreconditionFailedError(APIError):
    """Raised on 412: ``If-Match`` did not match the current ETag."""


class PayloadTooLargeError(APIError):
    """Raised on 413: the body exceeds the server's limit."""


class ServerError(APIError):
    """Raised on 5xx: the server failed or is unavailable."""


class StreamClosed(ClientError):
    """Raised when a stream is closed with a code that means "do not reconnect"."""

    def __init__(self, close_code: int, reason: str = "") -> None:
        self.close_code = close_code
        self.reason = reason
        self.code = error_code_for_close(close_code)
        super().__init__(f"stream closed with {close_code} ({self.code}): {reason}".rstrip(": "))


class StreamAuthError(StreamClosed):
    """Raised when the stream's token is refused and a fresh token is refused too."""


class StreamNotFound(StreamClosed):
    """Raised when the stream's path names an unknown type or an invisible simulation."""


class CursorExpired(StreamClosed):
    """Raised when ``since=`` points before the oldest retained event (a gap you must handle)."""


class WebhookVerificationError(ClientError):
    """Raised by ``verify_webhook`` when a signature, timestamp or header does not check."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    412: PreconditionFailedError,
    413: PayloadTooLargeError,
}

_CLOSE_TO_CODE: dict[int, str] = {
    spec.ws_close_code: spec.code for spec in ERRORS.values() if spec.ws_close_code is not None
}


def error_code_for_close(close_code: int) -> str:
    """The error table's code for a websocket close code (``"unknown"`` when it has none)."""
    return _CLOSE_TO_CODE.get(close_code, "unknown")


def api_error(status: int, body: Any) -> APIError:
    """The exception for an error response: ``body`` is the decoded JSON (or anything else)."""
    code, message, details = "", "", None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        code = str(error.get("code") or "")
        message = str(error.get("message") or "")
        raw_details = error.get("details")
        details = raw_details if isinstance(raw_details, list) else None
    if not code:
        code = "internal_error" if status >= 500 else "http_error"
    if not message:
        message = str(body)[:200] if body else f"HTTP {status}"
    spec = ERRORS.get(code)
    # The table knows the status of a code even if a proxy rewrote the response's status.
    cls_status = spec.http_status if spec and spec.http_status else status
    cls = ServerError if cls_status >= 500 else _BY_STATUS.get(cls_status, APIError)
    return cls(message, status=status, code=code, details=details)


def stream_error(close_code: int, reason: str) -> StreamClosed:
    """The exception for a do-not-reconnect close code."""
    if 4001 <= close_code <= 4004:
        return StreamAuthError(close_code, reason)
    if 4005 <= close_code <= 4007:
        return StreamNotFound(close_code, reason)
    if close_code == 4010:
        return CursorExpired(close_code, reason)
    return StreamClosed(close_code, reason)
