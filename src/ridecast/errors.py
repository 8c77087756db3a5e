"""The one table of ridecast errors, and the exception tree built on it.

Every error a client can meet has a stable ``code``. The same table gives its HTTP status
(REST API), its websocket close code (streams) and its description (README, SDK)::

    RidecastError                 code, message, details; .spec -> ErrorSpec
     ├── BadRequest               400: invalid_json, validation_error, unknown_message_type,
     │                                 simulation_id_mismatch, invalid_simulation_data,
     │                                 webhook_target_refused, invalid_cursor,
     │                                 unsupported_character,
     │                                 simulator_operation_failed, ...
     ├── Unauthorized             401: not_authenticated, invalid_credentials
     ├── NotFound                 404: not_found, simulation_not_found, ...
     ├── Conflict                 409: conflict, user_exists, invalid_state
     ├── PreconditionFailed       412: precondition_failed
     ├── Forbidden                403: cross_origin_refused, not_owner
     ├── PayloadTooLarge          413: payload_too_large
     ├── UnsupportedMediaType     415: unsupported_media_type
     ├── TooManyRequests          429: too_many_requests, too_many_streams
     ├── QuotaExceeded            403/429: quota_* (an organisation's quota)
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
    ErrorSpec("unsupported_character", 400, None,
              "A string or key of a JSON body holds U+0000 (NUL, sent as \\u0000), which "
              "PostgreSQL cannot keep in text: refused on every store alike; details name "
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
    ErrorSpec("cross_origin_refused", 403, None,
              "A POST, PUT, PATCH or DELETE carries an Origin header that is neither the "
              "server's own nor in RIDECAST_ALLOWED_ORIGINS: a page of another site cannot "
              "change anything (SECURITY.md, \"What a browser can do\"). Nothing changed."),
    ErrorSpec("unsupported_media_type", 415, None,
              "A POST, PUT, PATCH or DELETE has a body whose Content-Type is not JSON "
              "(application/json or application/<x>+json), or none: send "
              "'Content-Type: application/json' (curl --json). Nothing changed."),
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
    # An organisation's quotas (docs/simulator.md, "Quotas"). 429 for the quotas that free
    # themselves as the organisation's runs end (retrying later may succeed); 403 for those
    # that only the organisation's own action frees (fewer vehicles, deleting simulations,
    # templates or events): retrying the same request never helps.
    ErrorSpec("quota_runs", 429, None,
              "Your organisation has as many running or paused simulator runs as "
              "RIDECAST_QUOTA_RUNS_PER_ORG allows; stop one (or wait for one to finish), then "
              "start again. Nothing of the run was started."),
    ErrorSpec("quota_vehicles", 429, None,
              "This run's vehicles and those of your organisation's running and paused runs "
              "would exceed RIDECAST_QUOTA_VEHICLES_PER_ORG; stop a run or start a smaller "
              "one. Nothing of the run was started."),
    ErrorSpec("quota_vehicles_per_run", 403, None,
              "data.simulator.vehicles exceeds RIDECAST_QUOTA_VEHICLES_PER_RUN; start with "
              "fewer vehicles. Nothing of the run was started."),
    ErrorSpec("quota_simulations", 403, None,
              "Your organisation holds as many simulations as RIDECAST_QUOTA_SIMULATIONS_PER_ORG "
              "allows; delete one first. Nothing was created."),
    ErrorSpec("quota_templates", 403, None,
              "Your organisation holds as many templates as RIDECAST_QUOTA_TEMPLATES_PER_ORG "
              "allows; delete one first. Nothing was created."),
    ErrorSpec("quota_event_bytes", 403, None,
              "Your organisation's stored events would exceed RIDECAST_QUOTA_EVENT_BYTES_PER_ORG "
              "bytes; nothing of the request was stored (a simulator run stops with this "
              "error). Bytes come back as retention removes old events."),
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
    ErrorSpec("store_refused", 500, None,
              "The store refused a row of this request (a constraint it breaks, or a value "
              "that store cannot keep); nothing of the request was stored, and requests "
              "written in the same commit were stored and answered as if alone. Logged."),
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


class Forbidden(RidecastError):
    """Raised when the request may not do this, whoever sends it: a page of another web
    origin changing state (403)."""

    default_code = "cross_origin_refused"


class UnsupportedMediaType(RidecastError):
    """Raised when a state-changing request's body is not labelled JSON (415)."""

    default_code = "unsupported_media_type"


class PayloadTooLarge(RidecastError):
    """Raised when a body exceeds the configured limit (413)."""

    default_code = "payload_too_large"


class TooManyRequests(RidecastError):
    """Raised when a client must slow down: too many failed authentications (429)."""

    default_code = "too_many_requests"


class ServiceUnavailable(RidecastError):
    """Raised while the service cannot take the request (503); ``retry_after`` says when."""

    default_code = "service_unavailable"


class QuotaExceeded(RidecastError):
    """Raised when a request would break one of its organisation's quotas (403 or 429, by
    code: see the table)."""

    default_code = "quota_runs"
