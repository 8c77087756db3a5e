"""Pure SDK helpers: channel choice, stream URLs, frames and the webhook merge."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.client.protocol import (
    WEBHOOK_KEYS,
    http_to_ws,
    merge_webhook,
    plan_channel,
    read_frame,
    split_types,
    stream_url,
    without_webhook,
)
from ridecast.events import ALL_TYPES

TYPES = sorted(ALL_TYPES)


@pytest.mark.parametrize(
    ("http", "ws"),
    [("http://127.0.0.1:8000", "ws://127.0.0.1:8000"), ("https://x.io/base/", "wss://x.io/base"),
     ("ws://h:1", "ws://h:1")],
)
def test_http_to_ws(http: str, ws: str) -> None:
    """http maps to ws and https to wss, keeping host, port and path."""
    assert http_to_ws(http) == ws


def test_http_to_ws_refuses_other_schemes() -> None:
    """A base address that is not http(s)/ws(s) is a clear ValueError."""
    with pytest.raises(ValueError):
        http_to_ws("ftp://x")


@pytest.mark.parametrize(
    ("sim", "types", "path", "keep"),
    [(None, None, "/simulation_events/", None),
     (7, None, "/simulation_events/7", None),
     (None, ["gps_data"], "/simulation_events/gps_data", None),
     (7, ["gps_data"], "/simulation_events/7/gps_data", None),
     (7, ["offers", "bookings", "offers"], "/simulation_events/7", {"bookings", "offers"})],
)
def test_plan_channel(sim: int | None, types: list[str] | None, path: str,
                      keep: set[str] | None) -> None:
    """One type goes in the path; several share one connection filtered client-side."""
    channel = plan_channel(sim, types)
    assert channel.path == path
    assert channel.keep == (frozenset(keep) if keep else None)


@given(st.sets(st.sampled_from(TYPES)), st.sampled_from(TYPES))
def test_channel_keeps_exactly_the_wanted_types(wanted: set[str], arriving: str) -> None:
    """What the channel receives (path) and keeps (filter) is exactly the wanted types."""
    channel = plan_channel(3, wanted)
    server_sends = channel.path_type in (None, arriving)
    assert (server_sends and channel.wants(arriving)) == (not wanted or arriving in wanted)


def test_plan_channel_refuses_unknown_types() -> None:
    """An unknown type fails before any connection, naming the valid ones."""
    with pytest.raises(ValueError, match="gps_data"):
        plan_channel(None, ["teleport"])


def test_stream_url_carries_token_and_since() -> None:
    """The token and the resume cursor travel as query parameters."""
    url = stream_url("ws://h:1", plan_channel(5, ["assignment"]), "tok", "42")
    parts = urlsplit(url)
    assert parts.path == "/simulation_events/5/assignment"
    assert parse_qs(parts.query) == {"token": ["tok"], "since": ["42"]}
    assert "since" not in stream_url("ws://h:1", plan_channel(None, None), "tok", None)


def test_read_frame() -> None:
    """A frame's event_id and message_type are read; a non-object is refused."""
    header = read_frame('{"event_id": "9", "message_type": "gps_data", "data": {}}')
    assert (header.event_id, header.message_type) == ("9", "gps_data")
    with pytest.raises(ValueError):
        read_frame("[1]")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6),
       st.lists(st.sampled_from(TYPES), min_size=1), st.none() | st.just("whsec_abc"))
def test_merge_keeps_every_other_key(data: dict[str, Any], types: list[str],
                                     secret: str | None) -> None:
    """Setting a webhook changes only the webhook keys (spec rule 2); clearing removes them."""
    merged = merge_webhook(data, "http://r/h", types, secret)
    for key, value in data.items():
        if key not in WEBHOOK_KEYS:
            assert merged[key] == value
    assert merged["messaging_webhook_url"] == "http://r/h"
    assert merged["messaging_webhook_message_types"] == list(dict.fromkeys(types))
    if secret is None and "messaging_webhook_secret" in data:
        assert merged["messaging_webhook_secret"] == data["messaging_webhook_secret"]
    cleared = without_webhook(merged)
    assert not set(cleared) & set(WEBHOOK_KEYS)
    assert cleared == {k: v for k, v in data.items() if k not in WEBHOOK_KEYS}


def test_merge_refuses_empty_or_unknown_types() -> None:
    """An empty filter or an unknown type is refused before any request."""
    with pytest.raises(ValueError):
        merge_webhook({}, "http://r", [])
    with pytest.raises(ValueError, match="teleport"):
        merge_webhook({}, "http://r", ["teleport"])


def test_split_types() -> None:
    """Comma-separated and repeated values flatten in order, without repeats."""
    assert split_types(["a,b", " c ", "a", ""]) == ["a", "b", "c"]
