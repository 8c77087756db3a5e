"""Who may see what (pure): docs/design.md decision 8."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated user, as the visibility rule needs it."""

    user_id: int
    name: str
    org_id: int
    is_admin: bool = False
    # The API key the request authenticated with (None for a websocket token's user):
    # a token issued on this request remembers it, so revoking the key revokes the token.
    key_id: int | None = None


def can_see(principal: Principal, *, org_id: int, owner_id: int) -> bool:
    """A simulation is visible to its owner, to its organisation's users and to admins."""
    return principal.is_admin or principal.org_id == org_id or principal.user_id == owner_id
