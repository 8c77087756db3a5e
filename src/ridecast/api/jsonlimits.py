"""Limits on the shape of every JSON body, checked once at the edge (pure, no I/O).

A free-form field (a simulation's ``data``, an event's extra keys) can hold anything JSON
can, and what is stored is later serialised for every reader: a value 300 levels deep or an
integer of 100 digits would be accepted once and then fail every listing that contains it.
So every body is checked before any handler sees it, and refused whole with the JSON path of
the first offending value. The walk is iterative, so a hostile depth cannot exhaust the stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_WIDE = float(2**63)

NUL_CHARACTER = "holds U+0000 (NUL), which no store keeps in text: refused on every store"
"""The reason of a violation found by ``find_nul``; reported with the code
``unsupported_character``."""

WIDENED_FLOAT = "a number of 2**63 or more that may have been an integer literal"
"""The reason of a ``find_violation(..., widened_floats=True)`` violation: the caller reads
the text again with exact integers (``jsondecode``) and checks that value instead."""


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """The bounds a JSON value must respect (see ``RIDECAST_MAX_JSON_*``)."""

    max_depth: int = 32
    max_string: int = 65536
    max_items: int = 100_000


@dataclass(frozen=True, slots=True)
class Violation:
    """Where a value breaks a limit: its JSON path (``data.a.b[3]``) and why."""

    field: str
    reason: str


def _path(parts: tuple[str | int, ...]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


_SCALARS = (str, float, bool, type(None))


def _within_limits(value: Any, limits: JsonLimits, *, strings: bool, floats: bool) -> bool:
    """True when ``value`` breaks none of ``limits`` (string lengths only when ``strings``;
    floats of 2**63 or more are a doubt only when ``floats``).

    The cheap half of ``find_violation``: only containers are pushed, no path is built.
    False also for any type JSON does not produce (the full walk then decides).
    """
    max_depth, max_string, max_items = limits.max_depth, limits.max_string, limits.max_items
    if type(value) is not dict and type(value) is not list:
        if type(value) is str:
            return not strings or len(value) <= max_string
        if type(value) is float and floats:
            return -_WIDE < value < _WIDE
        return type(value) in _SCALARS or (type(value) is int and INT64_MIN <= value <= INT64_MAX)
    seen = 1  # values counted so far: the root, then each container's children
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth > max_depth:
            return False
        seen += len(item)
        if seen > max_items:
            return False
        depth += 1
        if type(item) is dict:
            if strings and item and max(map(len, item)) > max_string:
                return False
            children = item.values()
        else:
            children = item
        for child in children:
            kind = type(child)
            if kind is str:  # the most common value: one test, two when lengths count
                if strings and len(child) > max_string:
                    return False
            elif kind is dict or kind is list:
                push((child, depth))
            elif kind is int:
                if not INT64_MIN <= child <= INT64_MAX:
                    return False
            elif kind is float:
                if floats and not -_WIDE < child < _WIDE:
                    return False
            elif kind not in _SCALARS:
                return False
    return True


def find_violation(value: Any, limits: JsonLimits, *, size: int | None = None,
                   widened_floats: bool = False) -> Violation | None:
    """The first place where ``value`` (parsed JSON) breaks ``limits``, or None.

    Depth counts containers: ``{}`` is depth 1, ``{"a": []}`` depth 2. Integers must fit in
    a signed 64-bit integer (every id and number ridecast stores does); strings, keys
    included, are bounded in length; the total count of values is bounded too.

    A walk of containers only, with no paths, answers first (several times cheaper than
    building a path per value); a violation, or any doubt, falls through to the full walk,
    which finds the path to report. ``size``, the length in bytes of the JSON text
    ``value`` was parsed from, spares the string lengths when it is within their limit (no
    string of the text can be longer than the text).

    ``widened_floats`` says that ``value`` comes from a parser that turns an integer beyond
    64 bits into a float (orjson): a float of magnitude 2**63 or more is then reported with
    the reason ``WIDENED_FLOAT``, when nothing else is wrong before it.
    """
    if _within_limits(value, limits, strings=size is None or size > limits.max_string,
                      floats=widened_floats):
        return None
    stack: list[tuple[Any, tuple[str | int, ...], int]] = [(value, (), 0)]
    seen = 0
    widened: Violation | None = None
    while stack:
        item, path, depth = stack.pop()
        seen += 1
        if seen > limits.max_items:
            return Violation(_path(path), f"the body holds more than {limits.max_items} values")
        if isinstance(item, dict):
            if depth + 1 > limits.max_depth:
                return Violation(_path(path), f"nested deeper than {limits.max_depth} levels")
            for key, child in item.items():
                if len(key) > limits.max_string:
                    return Violation(
                        _path(path), f"a key is longer than {limits.max_string} characters"
                    )
                stack.append((child, (*path, key), depth + 1))
        elif isinstance(item, list):
            if depth + 1 > limits.max_depth:
                return Violation(_path(path), f"nested deeper than {limits.max_depth} levels")
            stack.extend((child, (*path, i), depth + 1) for i, child in enumerate(item))
        elif isinstance(item, str):
            if len(item) > limits.max_string:
                return Violation(_path(path), f"longer than {limits.max_string} characters")
        elif (
            isinstance(item, int)
            and not isinstance(item, bool)
            and not INT64_MIN <= item <= INT64_MAX
        ):
            return Violation(_path(path), "an integer outside the signed 64-bit range")
        elif (widened_floats and widened is None and isinstance(item, float)
              and not -_WIDE < item < _WIDE):
            widened = Violation(_path(path), WIDENED_FLOAT)
    return widened


def find_nul(value: Any) -> Violation | None:
    """The first string or key of ``value`` (parsed JSON) that holds U+0000, or None.

    PostgreSQL refuses NUL in every text column, and SQLite keeps it: refused here, at the
    edge, both stores accept and refuse the same bodies. Only called when the text holds
    the escape at all (``jsondecode``), so the walk costs nothing on ordinary bodies.
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if type(item) is str:
            if "\x00" in item:
                return Violation(_path(path), NUL_CHARACTER)
        elif type(item) is dict:
            for key, child in item.items():
                if "\x00" in key:
                    return Violation(_path((*path, key)), NUL_CHARACTER)
                stack.append((child, (*path, key)))
        elif type(item) is list:
            stack.extend((child, (*path, i)) for i, child in enumerate(item))
    return None
