"""FastAPI dependencies: the process's Runtime, the authenticated user, JSON bodies."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import Depends, Request

from ..auth.credentials import BasicCredentials, parse_authorization
from ..auth.visibility import Principal
from ..errors import BadRequest, TooManyRequests, Unauthorized
from ..runtime import Runtime
from .jsondecode import DecodeError, loads


async def get_runtime(request: Request) -> Runtime:
    # async on purpose: FastAPI runs a plain ``def`` dependency in a thread pool, a thread
    # hop on every request for one attribute read.
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def current_user(request: Request, runtime: RuntimeDep) -> Principal:
    """The user whose HTTP Basic, ``Token`` (API key) or ``Bearer`` (a token of
    ``GET /api/v2/user/token/``) credentials the request carries (else 401).

    A bearer token's user has no ``key_id``: its requests share one rate bucket per user.
    """
    return await authenticate(
        runtime, request.headers.get("authorization"),
        request.client.host if request.client else None,
    )


async def authenticate(runtime: Runtime, authorization: str | None,
                       address: str | None) -> Principal:
    """``current_user`` without FastAPI: the ``Authorization`` header and client address."""
    creds = parse_authorization(authorization)
    user = creds.username if isinstance(creds, BasicCredentials) else None
    limits = runtime.limits
    wait = await limits.login_wait(user, address)
    if wait is not None:
        raise TooManyRequests(
            "too many failed authentications for this user name from this address, or "
            f"from this address; retry in {math.ceil(wait)} s", retry_after=wait,
        )
    try:
        principal = await runtime.accounts.authenticate(creds)
    except Unauthorized:
        await limits.login_failed(user, address)
        raise
    bucket = (str(principal.key_id) if principal.key_id is not None
              else f"token-user:{principal.user_id}")
    wait = await limits.take(bucket)
    if wait is not None:
        raise TooManyRequests(
            f"more requests per second than this API key may send "
            f"(RIDECAST_RATE_LIMIT_PER_KEY={limits.rate:g}); retry shortly",
            retry_after=wait,
        )
    return principal


CurrentUser = Annotated[Principal, Depends(current_user)]


_MISSING = object()


async def json_body(request: Request) -> Any:
    """The request body parsed as JSON; a precise 400 when it is not.

    ``BodyGuard`` has usually parsed and checked it already (``state.json_body``).
    """
    parsed = request.scope.get("state", {}).get("json_body", _MISSING)
    if parsed is not _MISSING:
        return parsed
    raw = await request.body()
    if not raw.strip():
        raise BadRequest("the request body is empty; send JSON", code="invalid_json")
    try:
        return loads(raw)
    except DecodeError as exc:
        raise BadRequest(
            f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None


JsonBody = Annotated[Any, Depends(json_body)]
