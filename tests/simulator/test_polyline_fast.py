"""The fast polyline encoder (table lookups, and array arithmetic for long paths) against
the plain per-value algorithm, on random paths of every length and scale."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ridecast.simulator.core.polyline import _encode_value, decode, encode

LAT = st.floats(-90, 90, allow_nan=False)
LON = st.floats(-180, 180, allow_nan=False)


def reference(points: list[tuple[float, float]], precision: int = 5) -> str:
    factor = 10**precision
    out: list[str] = []
    prev_lat = prev_lon = 0
    for lat, lon in points:
        ilat, ilon = round(lat * factor), round(lon * factor)
        _encode_value(ilat - prev_lat, out)
        _encode_value(ilon - prev_lon, out)
        prev_lat, prev_lon = ilat, ilon
    return "".join(out)


@settings(max_examples=300)
@given(st.lists(st.tuples(LAT, LON), max_size=150), st.sampled_from([5, 6]))
def test_encode_matches_the_plain_algorithm(points: list[tuple[float, float]],
                                            precision: int) -> None:
    assert encode(points, precision) == reference(points, precision)


@settings(max_examples=100)
@given(st.tuples(LAT, LON), st.lists(st.tuples(st.floats(-1e-3, 1e-3), st.floats(-1e-3, 1e-3)),
                                     min_size=64, max_size=400))
def test_long_street_paths_round_trip(start: tuple[float, float],
                                      steps: list[tuple[float, float]]) -> None:
    points = [start]
    for dlat, dlon in steps:
        lat, lon = points[-1]
        points.append((max(-90.0, min(90.0, lat + dlat)), max(-180.0, min(180.0, lon + dlon))))
    text = encode(points)
    assert text == reference(points)
    decoded = decode(text)
    assert len(decoded) == len(points)
    assert all(abs(a - c) <= 0.6e-5 and abs(b - d) <= 0.6e-5
               for (a, b), (c, d) in zip(decoded, points, strict=True))


def test_the_standard_example_and_empty() -> None:
    assert encode([(38.5, -120.2), (40.7, -120.95), (43.252, -126.453)]) == (
        "_p~iF~ps|U_ulLnnqC_mqNvxq`@")
    assert encode([]) == ""
    assert encode(iter([(38.5, -120.2)])) == "_p~iF~ps|U"
