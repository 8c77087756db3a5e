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
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from .jsonlimits import WIDENED_FLOAT, JsonLimits, Violation, find_violation

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
    return value, violation


def loads(body: bytes | str) -> Any:
    """``body`` as strict JSON with exact integers, no limits checked; raises
    ``DecodeError``."""
    return decode(body, _NO_LIMITS)[0]


_NO_LIMITS = JsonLimits(max_depth=10_000, max_string=2**62, max_items=2**62)

__all__ = ["DecodeError", "decode", "loads"]
