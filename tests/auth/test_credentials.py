"""Credential parsing: every header either yields credentials or a precise 401, never a crash."""

from __future__ import annotations

import base64
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.auth.credentials import (
    BasicCredentials,
    KeyCredentials,
    parse_authorization,
    parse_ws_token,
)
from ridecast.auth.visibility import Principal, can_see
from ridecast.errors import Unauthorized

names = st.text(st.characters(blacklist_characters=":", blacklist_categories=["Cs"]), min_size=1)
keys = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1)


@given(names, keys)
def test_basic_round_trip(name: str, key: str) -> None:
    """Any user name without ':' and any key survive HTTP Basic encoding."""
    header = "Basic " + base64.b64encode(f"{name}:{key}".encode()).decode()
    assert parse_authorization(header) == BasicCredentials(name, key)


@given(st.text(st.characters(blacklist_categories=["Cs", "Zs", "Cc"]), min_size=1))
def test_token_scheme(key: str) -> None:
    """'Token <key>' carries the key as is."""
    assert parse_authorization(f"Token {key}") == KeyCredentials(key)


@given(st.text())
def test_anything_else_is_a_401_not_a_crash(header: str) -> None:
    """Arbitrary headers parse or raise Unauthorized with a table code."""
    try:
        parse_authorization(header)
    except Unauthorized as exc:
        assert exc.code in ("not_authenticated", "invalid_credentials")


@pytest.mark.parametrize("header", [None, "", "Basic", "Basic !!!", "Basic " +
                         base64.b64encode(b"nouser").decode(), "Bearer x", "Digest a=b"])
def test_bad_headers(header: str | None) -> None:
    """Known bad forms each get a 401."""
    with pytest.raises(Unauthorized):
        parse_authorization(header)


@given(st.uuids())
def test_ws_token_forms(token: uuid.UUID) -> None:
    """?token= wins; Authorization Bearer/Token work; case is normalised."""
    assert parse_ws_token(str(token).upper(), None) == str(token)
    assert parse_ws_token(None, f"Bearer {token}") == str(token)
    assert parse_ws_token(None, f"Token {token}") == str(token)


@pytest.mark.parametrize(("query", "header", "code"), [
    (None, None, "not_authenticated"), ("", None, "not_authenticated"),
    ("abc", None, "token_malformed"), (None, "Bearer 123", "token_malformed"),
])
def test_ws_token_refusals(query: str | None, header: str | None, code: str) -> None:
    """Missing and malformed tokens are told apart."""
    with pytest.raises(Unauthorized) as info:
        parse_ws_token(query, header)
    assert info.value.code == code


@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.booleans())
def test_visibility_rule(user_org: int, user_id: int, org: int, owner: int, admin: bool) -> None:
    """Owner, same organisation or admin; nobody else."""
    who = Principal(user_id, "u", user_org, admin)
    assert can_see(who, org_id=org, owner_id=owner) == (admin or user_org == org or
                                                         user_id == owner)
