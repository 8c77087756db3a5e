"""``GET /api/v2/user/token/``: a websocket token for the authenticated user."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Response
from pydantic import BaseModel, Field

from ..errors import Unauthorized
from .deps import CurrentUser, RuntimeDep
from .routing import SlashRouter

router = SlashRouter(tags=["token"])


class TokenResponse(BaseModel):
    """The interface's token response: exactly one field."""

    token: str = Field(description="Access token for websocket requests (UUID format).")


@router.get("/api/v2/user/token/", response_model=TokenResponse)
async def get_token(user: CurrentUser, runtime: RuntimeDep, response: Response) -> TokenResponse:
    """Issue a token to open ``/simulation_events/...`` streams (``?token=``).

    Authenticate with HTTP Basic (user name and API key) or ``Authorization: Token <key>``;
    a token itself (``Authorization: Bearer``) cannot issue another one.
    The token expires after ``RIDECAST_TOKEN_TTL_S``; the ``X-Token-Expires-At`` header says
    when.
    """
    if user.key_id is None:  # authenticated with a token: tokens do not beget tokens
        raise Unauthorized(
            "a token cannot issue another token: authenticate with the API key "
            "(HTTP Basic or 'Authorization: Token')", code="invalid_credentials",
        )
    issued = await runtime.accounts.issue_token(user, runtime.settings.token_ttl_s)
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Token-Expires-At"] = datetime.fromtimestamp(
        issued.expires_at, UTC
    ).isoformat()
    return TokenResponse(token=issued.token)
