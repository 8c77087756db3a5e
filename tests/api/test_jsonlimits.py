"""Properties of the pure validators at the edge: JSON limits and webhook settings."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ridecast.api.jsonlimits import INT64_MAX, INT64_MIN, JsonLimits, find_violation
from ridecast.errors import BadRequest
from ridecast.events.webhook_settings import validate_simulation_data, webhook_settings

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=40,
)
LIMITS = JsonLimits(max_depth=4, max_string=10, max_items=30)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value.keys(), *(s for v in value.values() for s in _strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _ints(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ints(v)]
    if isinstance(value, list):
        return [i for v in value for i in _ints(v)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


def _count(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_count(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_count(v) for v in value)
    return 1


@given(JSON)
def test_a_value_is_refused_exactly_when_it_breaks_a_limit(value: Any) -> None:
    """find_violation agrees with a direct (recursive) reading of the limits."""
    breaks = (
        _depth(value) > LIMITS.max_depth
        or any(len(s) > LIMITS.max_string for s in _strings(value))
        or any(not INT64_MIN <= i <= INT64_MAX for i in _ints(value))
        or _count(value) > LIMITS.max_items
    )
    assert (find_violation(value, LIMITS) is not None) == breaks


@given(JSON, st.sampled_from([JsonLimits(), LIMITS, JsonLimits(max_depth=2, max_string=400,
                                                                  max_items=400)]))
def test_the_size_shortcut_gives_the_same_answer_as_the_full_walk(
    value: Any, limits: JsonLimits
) -> None:
    """With the body's size (what BodyGuard passes) the answer is the same, path included."""
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, separators=(",", ":"))):
        size = len(text.encode())
        assert find_violation(json.loads(text), limits, size=size) == find_violation(
            json.loads(text), limits
        )


def test_depth_far_beyond_the_stack_is_refused_without_recursion() -> None:
    """100,000 levels: the iterative walk answers, naming the path's start."""
    value: Any = 1
    for _ in range(100_000):
        value = [value]
    violation = find_violation(value, JsonLimits())
    assert violation is not None and violation.field.startswith("[0]")


@given(st.dictionaries(st.sampled_from([
    "messaging_webhook_url", "messaging_webhook_message_types", "messaging_webhook_secret",
    "messaging_webhook_ordering", "other",
]), JSON, max_size=5))
def test_webhook_settings_validator_accepts_or_refuses_precisely(data: dict[str, Any]) -> None:
    """Any data is either valid (and then readable as settings) or a 400 naming a field."""
    try:
        checked = validate_simulation_data(json.loads(json.dumps(data)))
    except BadRequest as exc:
        assert exc.code in ("invalid_simulation_data", "webhook_target_refused")
        assert exc.details and exc.details[0].get("field")
    else:
        settings = webhook_settings(checked)
        assert settings is None or settings.url == checked["messaging_webhook_url"]
