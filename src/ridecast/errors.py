"""The one table of ridecast errors, and the exception tree built on it.

Every error a client can meet has a stable ``code``. The same table gives its HTTP status
(REST API), its websocket close code (streams) and its description (README, SDK)::

    RidecastError                 code, message, details; .spec -> ErrorSpec
     ├── BadRequest               400: invalid_json, validation_error, unknown_message_type,
     │                                 simulation_id_mismatch, invalid_simulation_data,
     │                                 webhook_target_refused, invalid_cursor,
     │                                 simulator_operation_failed, ...
     ├── Unauthorized             401: not_authenticated, invalid_credentials
     ├── NotFound                 404: not_found, simulation_not_found, ...
     ├── Conflict                 409: conflict, user_exists, invalid_state
     ├── PreconditionFailed       412: precondition_failed
     ├── PayloadTooLarge          413: payload_too_large
     ├── TooManyRequests          429: too_many_requests, too_many_streams
     └── ServiceUnavailable       503: service_unavailable, ingest_saturated,
                                       simulator_owner_unreachable

Websocket close codes follow Pusher's ranges: 4000-4099 "do not reconnect" (fix the request
first), 4100-4199 "reconnect with back-off"; 1001 when the server goes away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    """One row of the error table."""

    code: str
    http_status: int | None
    ws_close_code: int | None
    description: str


_ROWS: tuple[ErrorSpec, ...] = (
    ErrorSpec("invalid_json", 400, None,
              "The request body is not strict JSON: not JSON at all, invalid UTF-8, NaN or "
              "an infinity, or a lone surrogate escape such as \\ud800 (a pair is one "
              "character and is fine); the message gives the reason. Same on every route; "
              "nothing was stored."),
    ErrorSpec("validation_error", 400, None,
              "The body parsed but a field is missing, of the wrong type or out of range, "
              "or a path id is not a signed 64-bit integer; details lists each problem with "
              "its location."),
    ErrorSpec("unknown_message_type", 400, None,
              "message_type is not one of the 18 event types."),
    ErrorSpec("simulation_id_mismatch", 400, None,
              "An event's simulation_id differs from the simulation in the path."),
    ErrorSpec("invalid_simulation_data", 400, None,
              "Simulation data is not a JSON object, or a webhook key in it is invalid."),
    ErrorSpec("webhook_target_refused", 400, None,
              "messaging_webhook_url resolves to a refused address (link-local, metadata, "
              "reserved; loopback/private unless RIDECAST_WEBHOOK_ALLOW_PRIVATE)."),
    ErrorSpec("invalid_cursor", 400, 4008, "after= or since= is not an event_id."),
    ErrorSpec("invalid_query", 400, None,
              "A query parameter has a wrong value (not a number, out of its range, not one "
              "of its values: limit=abc, limit=0, status=nope); details name each one as "
              "query.<name>."),
    ErrorSpec("json_limit_exceeded", 400, None,
              "A JSON body is nested too deep, holds too long a string or too many values, or "
              "an integer outside the signed 64-bit range (RIDECAST_MAX_JSON_*); details name "
              "the field. Nothing was stored."),
    ErrorSpec("simulator_operation_failed", 400, None,
              "The simulator could not apply the operation with these arguments; the run "
              "is as it was before the request, nothing of it was journaled or published. "
              "Do not retry it unchanged."),
    ErrorSpec("not_authenticated", 401, 4001,
              "No credentials: send HTTP Basic (user name, API key), "
              "'Authorization: Token <api_key>', or a websocket ?token=."),
    ErrorSpec("invalid_credentials", 401, None, "The user name or API key is wrong or revoked."),
    ErrorSpec("token_malformed", 401, 4002, "The websocket token is not a UUID."),
    ErrorSpec("token_unknown", 401, 4003, "The websocket token was never issued or was revoked."),
    ErrorSpec("access_revoked", 401, 4011,
              "The stream's user, API key or token was revoked while it was open; do not "
              "reconnect with the same token."),
    ErrorSpec("token_expired", 401, 4004,
              "The websocket token has expired: get a new one from /api/v2/user/token/."),
    ErrorSpec("unknown_event_type", 404, 4005,
              "A websocket path names a type that is not one of the 18 event types."),
    ErrorSpec("simulation_not_found", 404, 4006,
              "No simulation with this id is visible to you (it may not exist)."),
    ErrorSpec("malformed_path", 404, 4007, "The websocket path is not one of the five shapes."),
    ErrorSpec("cursor_expired", 410, 4010,
              "since= points before the oldest retained event: the gap cannot be replayed."),
    ErrorSpec("not_found", 404, None, "No such resource."),
    ErrorSpec("not_owner", 403, None,
              "The template is visible to you but belongs to another user: only its owner "
              "or an admin may change or delete it."),
    ErrorSpec("template_not_found", 404, None, "No simulation template with this id is visible."),
    ErrorSpec("delivery_not_found", 404, None, "No webhook delivery with this id."),
    ErrorSpec("method_not_allowed", 405, None, "The path exists but not with this method."),
    ErrorSpec("conflict", 409, None, "The request conflicts with the current state."),
    ErrorSpec("user_exists", 409, None, "A user with this name exists already."),
    ErrorSpec("invalid_state", 409, None,
              "The operation does not apply in the object's current state "
              "(offer already answered, vehicle disabled, ...)."),
    ErrorSpec("precondition_failed", 412, None,
              "If-Match does not match the simulation's current ETag: read it again and retry."),
    ErrorSpec("payload_too_large", 413, None, "The request body exceeds RIDECAST_MAX_BODY_BYTES."),
    ErrorSpec("headers_too_large", 431, None,
              "The request line and headers exceed RIDECAST_MAX_HEADER_BYTES; the connection "
              "is closed."),
    ErrorSpec("too_many_requests", 429, None,
              "Too many failed authentications for this user name from this address, or from "
              "this address (RIDECAST_AUTH_FAILURES_*), or more requests per second than the "
              "API key may send (RIDECAST_RATE_LIMIT_*); wait for Retry-After seconds."),
    ErrorSpec("too_many_streams", 429, 4102,
              "The user or token has as many open streams as RIDECAST_WS_MAX_STREAMS_PER_USER "
              "or _PER_TOKEN allow; close one, then reconnect with back-off."),
    ErrorSpec("slow_consumer", None, 4100,
              "The client did not read fast enough and its send queue filled "
              "(RIDECAST_WS_SEND_QUEUE frames or RIDECAST_WS_SEND_QUEUE_BYTES bytes); "
              "reconnect with since=<last event_id> to resume without loss."),
    ErrorSpec("invalid_utf8", None, 1007,
              "The client sent a text message that is not valid UTF-8 (RFC 6455 section "
              "8.1); streams read nothing a client sends, but text must be UTF-8."),
    ErrorSpec("server_going_away", None, 1001,
              "The server is shutting down; reconnect (to it or another node) with "
              "since=<last event_id>."),
    ErrorSpec("internal_error", 500, 1011, "An unexpected error; it has been logged."),
    ErrorSpec("service_unavailable", 503, 4101,
              "The service is starting or stopping, or its store does not answer; retry "
              "after Retry-After seconds (streams: reconnect with back-off and since=)."),
    ErrorSpec("ingest_saturated", 503, None,
              "More events are waiting to be written than RIDECAST_INGEST_MAX_PENDING_EVENTS; "
              "nothing of this request was stored: retry after Retry-After seconds."),
    ErrorSpec("simulator_owner_unreachable", 503, None,
              "Another node runs this simulator and did not answer the forwarded command in "
              "time (RIDECAST_SIMULATOR_FORWARD_TIMEOUT_S), or the run is being taken over "
              "after its node stopped; retry after Retry-After seconds, by when its owner "
              "(the same node or the one that took it over) answers."),
)

ERRORS: dict[str, ErrorSpec] = {row.code: row for row in _ROWS}
"""Error specs by code."""


class RidecastError(Exception):
    """Base of every error ridecast reports to a client; ``code`` selects the table row."""

    default_code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        if self.code not in ERRORS:
            raise KeyError(f"unknown error code {self.code!r}")
        self.message = message
        self.details = details or []
        # Seconds a client should wait before retrying (the Retry-After header of a 429/503).
        self.retry_after = retry_after

    @property
    def spec(self) -> ErrorSpec:
        return ERRORS[self.code]

    @property
    def http_status(self) -> int:
        return self.spec.http_status or 500

    def to_body(self) -> dict[str, Any]:
        """The JSON error body: ``{"error": {"code", "message", "details"}}``."""
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class BadRequest(RidecastError):
    """Raised when a request is malformed or fails validation (400)."""

    default_code = "validation_error"


class Unauthorized(RidecastError):
    """Raised when credentials or a token are missing, wrong or expired (401)."""

    default_code = "not_authenticated"


class NotFound(RidecastError):
    """Raised when the resource does not exist or is not visible to the user (404)."""

    default_code = "not_found"


class Conflict(RidecastError):
    """Raised when the operation conflicts with the current state (409)."""

    default_code = "conflict"


class PreconditionFailed(RidecastError):
    """Raised when If-Match does not match the current ETag (412)."""

    default_code = "precondition_failed"


class PayloadTooLarge(RidecastError):
    """Raised when a body exceeds the configured limit (413)."""

    default_code = "payload_too_large"


class TooManyRequests(RidecastError):
    """Raised when a client must slow down: too many failed authentications (429)."""

    default_code = "too_many_requests"


class ServiceUnavailable(RidecastError):
    """Raised while the service cannot take the request (503); ``retry_after`` says when."""

    default_code = "service_unavailable"
