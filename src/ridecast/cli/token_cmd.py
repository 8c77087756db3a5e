"""``ridecast token``: a websocket token from a running server."""

from __future__ import annotations

from .remote import DEFAULT, JsonOption, KeyOption, UrlOption, UserOption, call, print_json


def token(
    url: UrlOption = DEFAULT,
    user: UserOption = None,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print a fresh websocket token (GET /api/v2/user/token/); use it as ?token= on streams."""
    value = call(url, user, key, lambda client: client.token())
    if as_json:
        print_json({"token": value})
    else:
        print(value)
