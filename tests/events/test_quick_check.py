"""The quick event check never accepts what the models refuse (events/quick_check.py)."""

from __future__ import annotations

import copy
import re
from datetime import datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import SchemaValidator

from ridecast.events import EVENT_ADAPTER
from ridecast.events.examples import all_examples
from ridecast.events.quick_check import QUICK_TIMESTAMP, quick_valid, quicken

EXAMPLES = all_examples(7)
TIMESTAMP_CHECK = SchemaValidator({"type": "str", "strict": True, "pattern": QUICK_TIMESTAMP})


def models_accept(event: Any) -> bool:
    try:
        EVENT_ADAPTER.validate_json(orjson.dumps(event))
    except ValidationError:
        return False
    return True


def quick_timestamp(value: str) -> bool:
    try:
        TIMESTAMP_CHECK.validate_python(value)
    except ValidationError:
        return False
    return True


def python_reads_with_offset(value: str) -> bool:
    try:
        return datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def test_every_example_passes_the_quick_check() -> None:
    # Otherwise the quick path would never be taken for real events.
    assert all(quick_valid(event) for event in EXAMPLES)


@given(st.from_regex(re.compile(QUICK_TIMESTAMP.removeprefix("^").removesuffix("$")),
                     fullmatch=True))
@settings(max_examples=500)
def test_every_quick_timestamp_is_an_iso_timestamp_with_an_offset(value: str) -> None:
    assert quick_timestamp(value)
    assert python_reads_with_offset(value)


@given(st.text(alphabet="0123456789-T:Z+. \n", min_size=10, max_size=32))
@settings(max_examples=1000)
def test_near_misses_are_accepted_only_when_python_reads_them(value: str) -> None:
    if quick_timestamp(value):
        assert python_reads_with_offset(value)


@pytest.mark.parametrize("value", [
    "2024-02-29T10:00:00+00:00",  # a leap day: the models decide
    "2024-05-06 06:00:00+00:00",  # a space for the T
    "2024-05-06T06:00:00.1234567+00:00",  # seven fractional digits
    "2024-05-06T06:00:00+00:00\n",
])
def test_other_iso_forms_are_left_to_the_models(value: str) -> None:
    assert not quick_timestamp(value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from(["2024-05-06T06:00:00Z", "2024-13-01T00:00:00Z", "abc",
                       "3fa85f64-5717-4562-b3fc-2c963f66afa6"]),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            out.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out.extend(_paths(child, (*prefix, index)))
    return out


@st.composite
def mutated_events(draw: st.DrawFn) -> Any:
    event = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [path for path in _paths(event) if path]
        path = draw(st.sampled_from(paths))
        parent = event
        for part in path[:-1]:
            parent = parent[part]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_values)
    return event


@given(mutated_events())
@settings(max_examples=1500)
def test_the_quick_check_never_accepts_what_the_models_refuse(event: Any) -> None:
    if quick_valid(event):
        assert models_accept(event)


def test_a_model_with_other_python_validation_is_refused() -> None:
    from pydantic import BaseModel, model_validator

    class Checked(BaseModel):
        a: int

        @model_validator(mode="after")
        def check(self) -> Checked:
            return self

    from pydantic import TypeAdapter
    with pytest.raises(ValueError, match="cannot quicken"):
        quicken(TypeAdapter(Checked).core_schema)


@st.composite
def events_with_extra_fields(draw: st.DrawFn) -> Any:
    """An example with 1-3 new keys (``zz_``: no model has such a field) in its objects."""
    event = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 3))):
        objects = [path for path in _paths(event) if isinstance(_at(event, path), dict)]
        parent = _at(event, draw(st.sampled_from(objects)))
        parent["zz_" + draw(st.text(max_size=6))] = draw(json_values)
    return event


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


@given(events_with_extra_fields())
@settings(max_examples=500)
def test_extra_fields_are_judged_as_the_models_judge_them(event: Any) -> None:
    # Models allow extra fields unchecked (the quick check ignores them rather than copy
    # them); a typed mapping (dict[str, int]) checks its new key's value in both. The quick
    # check is stricter only on timestamps and non-finite floats, which these are not.
    assert quick_valid(event) == models_accept(event)
