"""Tests of websocket path parsing (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.errors import BadRequest, NotFound
from ridecast.events.types import WEBSOCKET_TYPES
from ridecast.hub.paths import Route, parse_path, parse_since

TYPES = sorted(WEBSOCKET_TYPES)
ids = st.integers(min_value=0, max_value=10**12)
types = st.sampled_from(TYPES)
slash = st.sampled_from(["", "/"])


@given(slash)
def test_all_channel(tail: str) -> None:
    """/simulation_events/ and /simulation_events subscribe to everything."""
    assert parse_path("/simulation_events" + tail) == Route()


@given(ids, slash)
def test_simulation_channel(sim: int, tail: str) -> None:
    """An integer segment is a simulation id."""
    assert parse_path(f"/simulation_events/{sim}{tail}") == Route(simulation_id=sim)


@given(types, slash)
def test_type_channel(kind: str, tail: str) -> None:
    """A string segment is a type."""
    assert parse_path(f"/simulation_events/{kind}{tail}") == Route(message_type=kind)


@given(ids, types, slash, st.booleans())
def test_simulation_and_type_in_either_order(sim: int, kind: str, tail: str, flip: bool) -> None:
    """Both segment orders of a simulation and a type give the same route."""
    middle = f"{kind}/{sim}" if flip else f"{sim}/{kind}"
    assert parse_path(f"/simulation_events/{middle}{tail}") == Route(sim, kind)


def test_all_eighteen_types_are_accepted() -> None:
    """Every one of the 18 types may be named (DESIGN.md decision 4)."""
    assert len(TYPES) == 18
    for kind in TYPES:
        assert parse_path(f"/simulation_events/{kind}").message_type == kind


@pytest.mark.parametrize("name", ["gps", "GPS_DATA", "vehicle-use", "unknown_type"])
def test_unknown_type(name: str) -> None:
    """A word that is not one of the 18 types is unknown_event_type."""
    with pytest.raises(NotFound) as info:
        parse_path(f"/simulation_events/{name}")
    assert info.value.code == "unknown_event_type"
    assert info.value.spec.ws_close_code == 4005


@pytest.mark.parametrize(
    "path",
    [
        "/", "/simulation_event", "/simulation_eventsx", "/other/1",
        "/simulation_events//", "/simulation_events/1/2", "/simulation_events/gps_data/offers",
        "/simulation_events/1/gps_data/x", "/simulation_events//1", "/simulation_events/-1",
        "/simulation_events/1.5", "/simulation_events/1/gps_data//",
        "/simulation_events/" + "9" * 40,
    ],
)
def test_malformed(path: str) -> None:
    """Anything that is not one of the five shapes is malformed_path."""
    with pytest.raises(NotFound) as info:
        parse_path(path)
    assert info.value.code == "malformed_path"
    assert info.value.spec.ws_close_code == 4007


@given(st.text(max_size=40))
def test_any_path_parses_or_is_refused_with_a_path_code(tail: str) -> None:
    """No input makes the parser fail other than with the two path codes."""
    try:
        route = parse_path("/simulation_events/" + tail)
    except NotFound as exc:
        assert exc.code in ("malformed_path", "unknown_event_type")
    else:
        assert route.message_type is None or route.message_type in WEBSOCKET_TYPES


@given(ids, types)
def test_route_matches(sim: int, kind: str) -> None:
    """A route matches exactly the events of its simulation and type."""
    assert Route(sim, kind).matches(sim, kind)
    assert not Route(sim, kind).matches(sim + 1, kind)
    assert Route(None, None).matches(sim, kind)
    assert Route(sim, None).matches(sim, kind)


def test_since() -> None:
    """since= is absent, a non-negative integer, or invalid_cursor."""
    assert parse_since(None) is None
    assert parse_since("0") == 0
    assert parse_since("42") == 42
    for bad in ("", "-1", "x", "1.0", "١٢"):
        with pytest.raises(BadRequest) as info:
            parse_since(bad)
        assert info.value.spec.ws_close_code == 4008
