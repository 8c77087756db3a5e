"""The emitter's written-out builders give the generic ``emit``'s events, byte for byte."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from ridecast.events.types import MessageType
from ridecast.simulator.core.emit import Emitter
from ridecast.simulator.core.model import Vehicle

_FLOAT = st.floats(-1e4, 1e4, allow_nan=False)


@given(t=st.floats(0, 86400, allow_nan=False), lat=_FLOAT, lon=_FLOAT,
       bearing=st.floats(0, 360), speed=st.floats(0, 40), vehicle_id=st.integers(1, 10**6))
def test_gps_is_emit_written_out(t: float, lat: float, lon: float, bearing: float,
                                 speed: float, vehicle_id: int) -> None:
    """Same keys in the same order, same values, same counts."""
    vehicle = Vehicle(vehicle_id, f"uid-{vehicle_id}", 4, (lat, lon))
    fast, generic = Emitter(7, 1.7e9), Emitter(7, 1.7e9)
    fast.gps(t, vehicle, (lat, lon), bearing, speed)
    generic.emit(MessageType.GPS_DATA, t, {
        "vehicle_event": "gps_data", "vehicle_id": vehicle.id,
        "lat": round(lat, 7), "lon": round(lon, 7),
        "bearing": round(bearing, 1), "speed": round(speed, 2),
        "device_ts": generic.ts(t)}, vehicle.uid)
    assert [orjson.dumps(e) for e in fast.drain()] == [orjson.dumps(e) for e in generic.drain()]
    assert fast.counts == generic.counts
