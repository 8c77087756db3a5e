"""Google's encoded polyline algorithm (precision 5, the ``polyline5`` of assignment edges).

Each coordinate is rounded to 1e-5 degrees (about 1 m), delta-encoded against the previous
point, zig-zag signed, and written in 5-bit chunks as printable characters from ``?`` (63).
This is the format every map library decodes, so it must be exactly the standard one.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterable, Sequence

import numpy as np

LatLon = tuple[float, float]

PRECISION = 5


def _encode_value(value: int, out: list[str]) -> None:
    # Zig-zag: the sign moves to the lowest bit so small negatives stay short.
    value = ~(value << 1) if value < 0 else value << 1
    while value >= 0x20:
        out.append(chr((0x20 | (value & 0x1F)) + 63))
        value >>= 5
    out.append(chr(value + 63))


def _chars(value: int) -> str:
    out: list[str] = []
    _encode_value(value, out)
    return "".join(out)


# The encodings of every delta within +-2**14 (about 18 km at precision 5): consecutive
# points on a route almost always fall in it, so encoding a point is two lookups. 32,768
# short strings, about 1.8 MB, built on first use.
_SMALL = 1 << 14
_TABLE: list[str] = []


def _table() -> list[str]:
    if not _TABLE:
        _TABLE.extend(_chars(delta) for delta in range(-_SMALL, _SMALL))
    return _TABLE


def encode(points: Iterable[LatLon], precision: int = PRECISION) -> str:
    """Encode ``(lat, lon)`` points; ``encode([(38.5, -120.2)]) == '_p~iF~ps|U'``."""
    if not isinstance(points, list | tuple):
        points = list(points)
    if len(points) >= _ARRAY_FROM:
        text = _encode_array(points, precision)
        if text is not None:
            return text
    factor = 10**precision
    table = _table()
    small = _SMALL
    out: list[str] = []
    append = out.append
    prev_lat = prev_lon = 0
    for lat, lon in points:
        # round() matches the reference implementations (half away from zero differs only
        # on exact .5 ties, which floats practically never hit).
        ilat, ilon = round(lat * factor), round(lon * factor)
        d = ilat - prev_lat
        append(table[d + small] if -small <= d < small else _chars(d))
        d = ilon - prev_lon
        append(table[d + small] if -small <= d < small else _chars(d))
        prev_lat, prev_lon = ilat, ilon
    return "".join(out)


# From this many points on, array arithmetic beats the per-point loop.
_ARRAY_FROM = 64
_SHIFTS = np.arange(0, 35, 5, dtype=np.int64)  # 7 chunks: deltas below 2**34


def _encode_array(points: Sequence[LatLon], precision: int) -> str | None:
    """``encode`` as array arithmetic: rounding with ``np.rint`` (to nearest, ties to even,
    as ``round``), every 5-bit chunk of every value at once; None if a delta is too large
    for 7 chunks (the loop handles it)."""
    flat = np.frombuffer(array.array("d", itertools.chain.from_iterable(points)),
                         dtype=np.float64)
    ints = np.rint(flat * 10**precision).astype(np.int64)
    deltas = np.empty_like(ints)
    deltas[:2] = ints[:2]
    np.subtract(ints[2:], ints[:-2], out=deltas[2:])
    zigzag = np.where(deltas < 0, ~(deltas << 1), deltas << 1)
    if int(zigzag.max()) >> 35:
        return None
    rest = zigzag[:, None] >> _SHIFTS  # what is left of each value before its chunk k
    more = rest >= 0x20  # chunk k is followed by another
    present = np.empty_like(more)
    present[:, 0] = True
    present[:, 1:] = more[:, :-1]
    chars = (rest & 0x1F) + 63 + (more << 5)
    text: str = chars[present].astype(np.uint8).tobytes().decode("ascii")
    return text


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
