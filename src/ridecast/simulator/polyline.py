"""Google's encoded polyline algorithm (precision 5, the ``polyline5`` of assignment edges).

Each coordinate is rounded to 1e-5 degrees (about 1 m), delta-encoded against the previous
point, zig-zag signed, and written in 5-bit chunks as printable characters from ``?`` (63).
This is the format every map library decodes, so it must be exactly the standard one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

LatLon = tuple[float, float]

PRECISION = 5


def _encode_value(value: int, out: list[str]) -> None:
    # Zig-zag: the sign moves to the lowest bit so small negatives stay short.
    value = ~(value << 1) if value < 0 else value << 1
    while value >= 0x20:
        out.append(chr((0x20 | (value & 0x1F)) + 63))
        value >>= 5
    out.append(chr(value + 63))


def encode(points: Iterable[LatLon], precision: int = PRECISION) -> str:
    """Encode ``(lat, lon)`` points; ``encode([(38.5, -120.2)]) == '_p~iF~ps|U'``."""
    factor = 10**precision
    out: list[str] = []
    prev_lat = prev_lon = 0
    for lat, lon in points:
        # round() matches the reference implementations (half away from zero differs only
        # on exact .5 ties, which floats practically never hit).
        ilat, ilon = round(lat * factor), round(lon * factor)
        _encode_value(ilat - prev_lat, out)
        _encode_value(ilon - prev_lon, out)
        prev_lat, prev_lon = ilat, ilon
    return "".join(out)


def decode(text: str, precision: int = PRECISION) -> list[LatLon]:
    """Decode a polyline into ``(lat, lon)`` points; raises ValueError if it is truncated."""
    factor = float(10**precision)
    points: list[LatLon] = []
    index, length = 0, len(text)
    lat = lon = 0
    while index < length:
        deltas: list[int] = []
        for _ in range(2):
            shift = result = 0
            while True:
                if index >= length:
                    raise ValueError("truncated polyline")
                byte = ord(text[index]) - 63
                index += 1
                if byte < 0 or byte > 63:
                    raise ValueError(f"invalid polyline character at {index - 1}")
                result |= (byte & 0x1F) << shift
                shift += 5
                if byte < 0x20:
                    break
            deltas.append(~(result >> 1) if result & 1 else result >> 1)
        lat += deltas[0]
        lon += deltas[1]
        points.append((lat / factor, lon / factor))
    return points


def dedupe(points: Sequence[LatLon]) -> list[LatLon]:
    """Drop consecutive repeats (a vehicle waiting at a node adds no geometry)."""
    out: list[LatLon] = []
    for point in points:
        if not out or out[-1] != point:
            out.append(point)
    return out
