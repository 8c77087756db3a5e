"""A quicker check that an event is valid, for ingest's hot path; the models stay the rule.

``EVENT_ADAPTER`` builds one model instance per payload object and calls Python for every
timestamp (``fields._check_timestamp``), though ingest throws the instances away: it
stores the bytes it was sent. ``QUICK_EVENT_CHECK`` is a validator compiled from the same
core schema, with changes that can only make it stricter, never laxer:

* every ``model`` step validates its fields into a plain dict (the same field validators,
  the same ``extra`` rule, except that extra fields a model allows unchecked are ignored:
  accepted just the same, not copied into the unused output), no instance is built;
* a float must be finite (NaN has no JSON form; the stored body would hold null);
* a timestamp is matched against ``QUICK_TIMESTAMP``, a pattern run by pydantic-core's
  regex engine that accepts only plain RFC 3339 forms, every one of which
  ``datetime.fromisoformat`` reads with an offset (tests/events/test_quick_check.py checks
  that with hypothesis).

So when ``quick_valid(event)`` says yes, the models accept the event's JSON; when it says
no, the caller asks the models, which decide and word the errors (a valid timestamp in
another ISO 8601 form, such as a space for the ``T`` or a leap day, takes that path).
It is checked on the parsed value (pydantic-core's Python mode), which for the values JSON
produces (dict, list, str, int, float, bool, None) decides as its JSON mode does.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import SchemaValidator

from .envelope import EVENT_ADAPTER
from .fields import _check_timestamp

# Years 1000-9999; days a month always has (29 and 30 outside February, 31 in the long
# months; 29 February goes to the models); 24-hour time with seconds, 1-6 fractional
# digits; Z or an offset under 24 hours. [0-9], not \d: the Rust engine's \d is Unicode.
_DAY = ("(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
        "|(?:0[13-9]|1[0-2])-(?:29|30)"
        "|(?:0[13578]|1[02])-31)")
QUICK_TIMESTAMP = (
    f"^[1-9][0-9]{{3}}-{_DAY}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{{1,6}})?"
    "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
)


def _is_timestamp_check(schema: dict[str, Any]) -> bool:
    function = schema.get("function")
    return (schema.get("type") == "function-after" and isinstance(function, dict)
            and function.get("function") is _check_timestamp)


def quicken(schema: Any) -> Any:
    """``schema`` (a pydantic-core schema) with models as dicts and timestamps as patterns.

    Refuses (``ValueError``) any step it does not know to be safe to change: a model with a
    custom ``__init__`` or post-init, a model that is a root model, and any other Python
    function validator, since these may expect a model instance.
    """
    if isinstance(schema, list):
        return [quicken(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind == "model":
        if schema.get("custom_init") or schema.get("post_init") or schema.get("root_model"):
            raise ValueError(f"cannot quicken model {schema.get('cls')!r}")
        inner = dict(quicken(schema["schema"]))
        extra = schema.get("config", {}).get("extra_fields_behavior")
        if extra is not None:
            inner.setdefault("extra_behavior", extra)
        if inner.get("extra_behavior") == "allow" and "extras_schema" not in inner:
            # Accepted unchecked either way; "ignore" only skips copying them into an
            # output nobody reads (a fifth of the check's time on the examples).
            inner["extra_behavior"] = "ignore"
        return inner
    if kind is not None and str(kind).startswith("function"):
        if not _is_timestamp_check(schema):
            raise ValueError(f"cannot quicken a {kind} validator")
        inner = quicken(schema["schema"])
        if inner.get("type") != "str" or not inner.get("strict") or "pattern" in inner:
            raise ValueError("a timestamp check on something other than a strict str")
        return {**inner, "pattern": QUICK_TIMESTAMP}
    quick = {key: quicken(value) for key, value in schema.items()}
    if kind == "float":  # NaN and infinities have no JSON form (orjson stores null)
        quick["allow_inf_nan"] = False
    return quick


QUICK_EVENT_CHECK = SchemaValidator(quicken(EVENT_ADAPTER.core_schema))


def quick_valid(event: Any) -> bool:
    """True when ``event`` (a parsed JSON value) is surely a valid event; False when the
    models must decide."""
    try:
        QUICK_EVENT_CHECK.validate_python(event)
    except ValidationError:
        return False
    return True
