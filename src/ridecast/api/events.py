"""Event ingest and history: ``POST/GET /api/v2/simulation/{id}/events``."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import Query, Response, status
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..auth.credentials import BasicCredentials, parse_authorization
from ..auth.visibility import Principal
from ..bus import StoredEvent
from ..errors import BadRequest, RidecastError
from ..events import ALL_TYPES, EVENT_ADAPTER
from ..metrics import INGEST_LATENCY, count_ingested
from ..runtime import Runtime
from ..store.accounts import CacheKey, Checked
from .deps import CurrentUser, JsonBody, RuntimeDep, authenticate
from .errors import (
    answer_unexpected,
    error_response,
    is_missing,
    parse_json_body,
    read_body,
    replaying,
    ridecast_error_response,
)
from .jsonlimits import INT64_MAX, JsonLimits
from .params import Id
from .responses import EventPage, IngestResult, answers
from .routing import SlashRouter

router = SlashRouter(tags=["events"])

_EVENT_SCHEMA_REF = {"$ref": "#/components/schemas/EventIn"}  # api/openapi.py
_INGEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [_EVENT_SCHEMA_REF, {"type": "array", "items": _EVENT_SCHEMA_REF}]
                }
            }
        },
    }
}


@router.post(
    "/api/v2/simulation/{simulation_id}/events",
    status_code=status.HTTP_201_CREATED,
    openapi_extra=_INGEST_BODY,
    **answers(IngestResult, 201),
)
async def post_events(
    simulation_id: Id, body: JsonBody, user: CurrentUser, runtime: RuntimeDep
) -> Response:
    """Append one event or an array of events, all or nothing.

    ``simulation_id`` comes from the path (a different one in an event is a 400),
    ``server_ts`` is filled when missing (except for gps_data), and each event gets an
    ``event_id``. They are then delivered to websocket streams and webhooks.
    """
    return Response(await _ingest_body(runtime, user, simulation_id, body), status_code=201,
                    media_type="application/json")


async def _ingest_body(runtime: Runtime, user: Principal, simulation_id: int,
                       body: Any) -> bytes:
    """``post_events`` once the request is parsed and authenticated (both paths share it):
    the 201's body."""
    started = time.perf_counter()
    meta = await runtime.simulations.visible_meta(user, simulation_id)  # 404 unless visible
    items = body if isinstance(body, list) else [body]
    if not items:
        raise BadRequest("the batch is empty; send one event or a non-empty array")
    # ``body`` is parsed JSON on both paths (the body guard's or the fast path's orjson).
    stored = await runtime.ingest.submit(simulation_id, items, meta=meta, from_json=True)
    return created_body(stored, started)


def created_body(stored: list[StoredEvent], started: float) -> bytes:
    """The 201's body for ``stored``, the ingest latency since ``started`` observed."""
    INGEST_LATENCY.observe(time.perf_counter() - started)
    answer = {"event_ids": [str(event.event_id) for event in stored], "count": len(stored)}
    # Encoded here: FastAPI's generic encoder costs more than the rest of a small request.
    return orjson.dumps(answer)


# The ingest route's path, for ids the ``Id`` parameter takes as they are (no sign, no
# leading zero, at most 19 digits); any other form goes through FastAPI, which decides.
INGEST_PATH = re.compile(r"/api/v2/simulation/([1-9][0-9]{0,18})/events/?")
CREATED_HEADERS = [(b"content-type", b"application/json")]


class IngestFastPath:
    """Serves ``POST /api/v2/simulation/{id}/events`` ahead of FastAPI's middleware stack.

    The hot path of every producer: FastAPI's middleware layers, route matching and
    dependency solving cost more CPU than the ingest itself. This does what the stack and
    the route do, in the same order: the body guard (413 over the size, the JSON limits),
    then the credentials, then the path id, then the handler, with the same functions, the
    same error responses and the same catch-all 500 (tests/api/test_ingest_fast_path.py
    compares both byte for byte). What it
    cannot decide exactly as they would (a body that is not JSON or breaks a limit, no
    runtime yet) it hands to the full stack, body included.
    """

    def __init__(self, max_bytes: int, limits: JsonLimits) -> None:
        self.max_bytes = max_bytes
        self.limits = limits
        self.served = 0  # requests answered here (tests check that it serves)

    @staticmethod
    def simulation_id(scope: Scope) -> int | None:
        """The simulation id when ``scope`` is a request this path serves, else None."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        match = INGEST_PATH.fullmatch(scope["path"])
        if match is None:
            return None
        simulation_id = int(match[1])
        return simulation_id if simulation_id <= INT64_MAX else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send, simulation_id: int,
                       runtime: Runtime | None, stack: ASGIApp) -> None:
        """Answer the request, or hand it to ``stack`` (the full application)."""
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            body = await read_body(scope, receive, self.max_bytes)
            if body is None:  # the client left
                return
            if isinstance(body, RidecastError):
                await error_response(body)(scope, receive, tracking_send)
                return
            parsed = None
            if body and runtime is not None:
                parsed, _refused = parse_json_body(body, self.limits)
            if runtime is None or parsed is None or is_missing(parsed):
                await stack(scope, replaying(body, receive), tracking_send)
                return
            self.served += 1
            await self._answer(scope, tracking_send, simulation_id, runtime, parsed)
        except Exception:
            if not await answer_unexpected(scope, receive, send, started):
                raise

    def start_now(self, runtime: Runtime, simulation_id: int, authorization: str | None,
                  address: str | None, body: bytes,
                  seen: SeenCredentials | None = None) -> Accepted | None:
        """Queue the request's events without awaiting anything, when that is sure to end
        as the full path would: a body within the limits, credentials and a visible
        simulation both in their caches, valid events, a rate token and room in the log.

        The steps are those of ``__call__`` (body guard, ``authenticate``, ``_ingest_body``)
        in their order, with the same functions; any doubt or error before the events are
        queued returns None, having changed nothing but the rate bucket of a request that
        then continues on the full path (a refused take spends no token, and every other
        step before it is without effect), which decides and words the answer. Afterwards
        the request cannot fail but in the event log: ``Accepted.stored`` says how.

        ``seen``: the connection's ``SeenCredentials``, which spares parsing and hashing
        the same ``Authorization`` again on each of its requests.
        """
        started = time.perf_counter()
        if not body:
            return None
        parsed, refused = parse_json_body(body, self.limits)
        if refused is not None or is_missing(parsed):
            return None
        items = parsed if isinstance(parsed, list) else [parsed]
        if not items:
            return None
        if seen is not None and seen.header == authorization and seen.creds is not None:
            creds, key = seen.creds, seen.key
        else:
            try:
                parsed_creds = parse_authorization(authorization)
            except RidecastError:
                return None
            creds, key = parsed_creds, runtime.accounts.cache_key(parsed_creds)
            if seen is not None:
                seen.header, seen.creds, seen.key = authorization, creds, key
        user = creds.username if isinstance(creds, BasicCredentials) else None
        limits = runtime.limits
        if not limits.login_clear_now(user, address):
            return None
        principal = runtime.accounts.cached_principal(creds, key)
        if principal is None:
            return None
        meta = runtime.simulations.cached_visible_meta(principal, simulation_id)
        if meta is None:
            return None
        try:
            prepared = runtime.ingest.prepare(meta, items, from_json=True)
        except RidecastError:
            return None
        if not runtime.log.accepts(len(prepared)) or not runtime.log.within_quota(prepared):
            return None
        bucket = (str(principal.key_id) if principal.key_id is not None
                  else f"token-user:{principal.user_id}")
        if not limits.take_now(bucket):
            return None
        stored = runtime.log.append_nowait(prepared)
        self.served += 1
        return Accepted(stored, started)

    @staticmethod
    async def _answer(scope: Scope, send: Send, simulation_id: int, runtime: Runtime,
                      parsed: Any) -> None:
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        client = scope.get("client")
        try:
            user = await authenticate(runtime, authorization, client[0] if client else None)
            body = await _ingest_body(runtime, user, simulation_id, parsed)
        except RidecastError as exc:
            response = ridecast_error_response(
                exc, scope.get("root_path", "") + scope["path"], "POST"
            )
            await response(scope, _no_receive, send)
            return
        await send({"type": "http.response.start", "status": 201, "headers": [
            (b"content-length", str(len(body)).encode()), *CREATED_HEADERS]})
        await send({"type": "http.response.body", "body": body})


@dataclass(slots=True)
class SeenCredentials:
    """The last ``Authorization`` header of one connection that ``start_now`` parsed, its
    credentials and their place in the credential cache (``AccountStore.cache_key``): a
    producer sends the same header on every request of its connection. Only the parsing
    and hashing are kept; the user behind them is looked up in the shared cache on every
    request, so a revocation or an expiry applies as it does on the full path. It lives as
    long as the connection (the key in it too, as in the connection's buffers)."""

    header: str | None = None
    creds: Checked | None = None
    key: CacheKey = ("", None, False)


@dataclass(slots=True)  # not frozen: built per request, and frozen costs more to build
class Accepted:
    """Events queued by ``IngestFastPath.start_now``: the future of their commit, and
    when the request started (for the latency metric)."""

    stored: asyncio.Future[list[StoredEvent]]
    started: float

    def created(self) -> bytes:
        """The 201's body once ``stored`` holds the events (counted in the metrics)."""
        stored = self.stored.result()
        count_ingested([event.message_type for event in stored])
        return created_body(stored, self.started)


async def answer_failure(scope: Scope, send: Send, exc: BaseException) -> None:
    """Answer what an ``Accepted`` request's commit raised, as ``IngestFastPath`` would."""
    try:
        raise exc
    except RidecastError as error:
        response = ridecast_error_response(
            error, scope.get("root_path", "") + scope["path"], "POST"
        )
        await response(scope, _no_receive, send)
    except Exception:
        if not await answer_unexpected(scope, _no_receive, send, False):
            raise


async def _no_receive() -> Message:
    raise RuntimeError("a response does not read the request")


def parse_cursor(value: str | None, name: str) -> int:
    """An event_id cursor from a query parameter (0 when absent)."""
    if value is None or value == "":
        return 0
    try:
        cursor = int(value)
    except ValueError:
        cursor = -1
    if not 0 <= cursor <= INT64_MAX:
        raise BadRequest(
            f"{name}={value!r} is not an event_id", code="invalid_cursor",
            details=[{"field": f"query.{name}", "value": value}],
        )
    return cursor


def parse_types(values: list[str] | None) -> list[str] | None:
    """message_type filters: repeated and/or comma-separated; unknown ones are a 400."""
    if not values:
        return None
    types = [t.strip() for value in values for t in value.split(",") if t.strip()]
    unknown = [t for t in types if t not in ALL_TYPES]
    if unknown:
        raise BadRequest(
            f"unknown message_type(s): {', '.join(unknown)}; valid values: "
            f"{', '.join(sorted(ALL_TYPES))}",
            code="unknown_message_type",
            details=[{"field": "query.message_type", "value": unknown}],
        )
    return types


@router.get("/api/v2/simulation/{simulation_id}/events", **answers(EventPage))
async def get_events(
    simulation_id: Id,
    user: CurrentUser,
    runtime: RuntimeDep,
    after: Annotated[str | None, Query(description="Return events after this event_id.")] = None,
    message_type: Annotated[list[str] | None, Query(
        description="Only these types (repeat the parameter, or separate with commas).",
        json_schema_extra={"items": {"type": "string", "enum": sorted(ALL_TYPES)}},
    )] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    """The simulation's events in order, after the cursor; page with ``meta.next_after``.

    A page ends after ``limit`` events or before the event that would take its frames past
    ``RIDECAST_MAX_PAGE_BYTES`` (``meta.truncated`` is then true: more events follow
    although ``count`` is below ``limit``); an event larger than that budget comes alone on
    its page. Passing ``meta.next_after`` as ``after=`` reaches every event.
    """
    await runtime.simulations.visible_meta(user, simulation_id)
    cursor = parse_cursor(after, "after")
    types = parse_types(message_type)
    upto, truncated = await runtime.log.page_end(
        after=cursor, limit=limit, max_bytes=runtime.settings.max_page_bytes,
        simulation_id=simulation_id, message_types=types,
    )
    events = [] if upto is None else await runtime.log.read(
        after=cursor, limit=limit, simulation_id=simulation_id, message_types=types,
        upto=upto,
    )
    meta = {
        "after": str(cursor),
        "limit": limit,
        "count": len(events),
        "next_after": str(events[-1].event_id) if events else None,
        "truncated": truncated,
    }
    # The frames are stored JSON already: splice them instead of parsing and re-encoding.
    body = b'{"objects":[%s],"meta":%s}' % (
        b",".join(event.frame for event in events),
        orjson.dumps(meta),
    )
    return Response(body, media_type="application/json")


def event_json_schema() -> dict[str, Any]:
    """JSON Schema of ``Event`` with its definitions, for the OpenAPI components."""
    return EVENT_ADAPTER.json_schema(ref_template="#/components/schemas/{model}")
