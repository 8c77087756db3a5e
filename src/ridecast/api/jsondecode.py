"""The one JSON decoder of the HTTP edge: strict text, exact integers (pure, no I/O).

Every route's body goes through it: the body guard, the ingest fast path and the request
class of every FastAPI route (``StrictJsonRequest``), so a body means the same on every
route and nothing is stored that a response could not encode again.

Strict means what orjson refuses: invalid UTF-8, a lone surrogate escape (``"\\ud800"``,
which the standard library accepts and every later response would fail to encode), NaN
and infinities. orjson turns an integer literal beyond 64 bits into a float (so
``99999999999999999999`` would be stored as ``1e+20``); when the limit walk meets a float
that large, the text is read again with the standard library, which keeps integers exact,
and the walk then refuses such an integer by its path, as on every route.

A string or key holding U+0000 is refused too (``NUL_CHARACTER``): valid JSON, but
PostgreSQL stores no NUL in text, and both stores must accept the same bodies. JSON can
only carry it as the escape ``\\u0000`` (a raw control character is not JSON), so only a
text holding that escape is walked.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from .jsonlimits import WIDENED_FLOAT, JsonLimits, Violation, find_nul, find_violation

DecodeError = orjson.JSONDecodeError
"""Raised for a body that is not strict JSON; a ``json.JSONDecodeError``, so FastAPI
reports it as it reports any undecodable body (400 ``invalid_json``)."""


def decode(body: bytes | str, limits: JsonLimits) -> tuple[Any, Violation | None]:
    """``body`` parsed strictly and checked against ``limits``: ``(value, None)``, or the
    value and the first place it breaks them; raises ``DecodeError`` when not strict JSON."""
    size = len(body)
    value = orjson.loads(body)
    violation = find_violation(value, limits, size=size, widened_floats=True)
    if violation is not None and violation.reason == WIDENED_FLOAT:
        # orjson has accepted the text (no lone surrogate, no NaN); only the width of its
        # integers is in doubt, and the standard library reads those exactly.
        try:
            value = json.loads(body)
        except RecursionError:
            return None, Violation("", "nested too deep to parse")
        violation = find_violation(value, limits, size=size)
    if violation is None and (_NUL_ESCAPE_B in body if isinstance(body, bytes)
                              else _NUL_ESCAPE in body):
        violation = find_nul(value)
    return value, violation


def loads(body: bytes | str) -> Any:
    """``body`` as strict JSON with exact integers, no limits checked; raises
    ``DecodeError``."""
    return decode(body, _NO_LIMITS)[0]


_NUL_ESCAPE = "\\u0000"
_NUL_ESCAPE_B = b"\\u0000"
_NO_LIMITS = JsonLimits(max_depth=10_000, max_string=2**62, max_items=2**62)

__all__ = ["DecodeError", "decode", "loads"]
