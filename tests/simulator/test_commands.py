"""Simulator commands as data: JSON round trip, the name table, and mapping to the engine."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ridecast.errors import BadRequest, RidecastError
from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.commands import CONTROLS, OPERATIONS, Command, apply
from ridecast.simulator.core.operations import Operations

START = datetime(2024, 1, 1, 8, tzinfo=UTC)


def test_every_operation_is_an_engine_method() -> None:
    """Each operation name is a public method of Operations; controls are not."""
    for name in OPERATIONS:
        assert callable(getattr(Operations, name, None)), name
    assert not CONTROLS & OPERATIONS


def test_round_trip_and_unknown_names() -> None:
    """A command survives JSON; an unknown name or non-object arguments are refused."""
    cmd = Command("push_position", {"vehicle_id": 1, "lat": 52.5, "lon": 13.4,
                                    "bearing": None, "speed": 3.5})
    assert Command.from_json(cmd.name, cmd.args_json()) == cmd
    assert Command("start", {"data": None}).is_control
    with pytest.raises(BadRequest):
        Command("shutdown_server")
    with pytest.raises(BadRequest):
        Command.from_json("pause", "[1]")


def test_apply_adds_published_and_keeps_engine_errors() -> None:
    """apply returns the operation's body with the message types it published; an engine
    error (unknown offer) is raised as is; a control is not an operation."""
    engine = Engine(1, SimulatorSettings(seed=1, vehicles=2, bookings_per_hour=0), START)
    body, events = apply(engine, Command("create_booking", {
        "pickup_lat": 52.52, "pickup_lon": 13.405, "dropoff_lat": 52.525, "dropoff_lon": 13.42,
        "passengers": 1, "max_wait_s": None}))
    assert body["published"] == [e["message_type"] for e in events]
    assert body["published"][0] == "bookings"
    with pytest.raises(RidecastError) as caught:
        apply(engine, Command("accept_offer", {"offer_id": 999_999}))
    assert caught.value.http_status == 404
    with pytest.raises(ValueError):
        apply(engine, Command("pause"))
