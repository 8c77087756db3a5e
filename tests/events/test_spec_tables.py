"""Walk the interface's tables and check every field is in the models, named and typed as written.

The spec is vendored in docs/spec/; when the team's shared copy sits beside the checkout, the
vendored one must be identical, so a change of contract cannot slip past this test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ridecast.events import EVENT_MODELS, PAYLOAD_MODELS, MessageType
from ridecast.events import payloads as p
from ridecast.events.envelope import Envelope, GpsDataEvent

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "spec" / "event-delivery-interface.md"
SHARED = ROOT.parent / "shared" / "spec" / "event-delivery-interface.md"
TEXT = SPEC.read_text()


def _schema(model: type[Any]) -> dict[str, Any]:
    return model.model_json_schema()  # type: ignore[no-any-return]


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follow $ref and unwrap Optional (anyOf with null) to the concrete schema."""
    while True:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].split("/")[-1]]
        elif "anyOf" in node:
            node = next(n for n in node["anyOf"] if n.get("type") != "null")
        else:
            return node


NAMED_OBJECTS = {"Booking", "Offer", "Node", "Edge", "Vehicle state", "Ticket"}


def _kind(phrase: str) -> tuple[str, str | None]:
    """(JSON type, format or item type) a spec type phrase stands for."""
    if phrase.strip().startswith("array of"):
        rest = phrase.strip()[len("array of"):].strip()
        # "array of Booking" (a named object) or "array of objects with ..."
        if rest in NAMED_OBJECTS or rest.startswith("object"):
            return "array", "object"
        item = ("integer" if "integer" in rest else "string" if "string" in rest
                else "number" if "number" in rest else "object")
        return "array", item
    phrase = phrase.strip().lower()
    if phrase.startswith("array"):
        return "array", None
    if "timestamp" in phrase:
        return "string", "date-time"
    if "uuid" in phrase:
        return "string", "uuid"
    for word in ("integer", "number", "boolean", "string", "object"):
        if phrase.startswith(word) or phrase.startswith(f"json {word}"):
            return word, None
    raise AssertionError(f"unknown type phrase {phrase!r}")


def _check_field(model: type[Any], name: str, phrase: str, *, required: bool = True) -> None:
    schema = _schema(model)
    props = schema["properties"]
    assert name in props, f"{model.__name__} lacks field {name!r} (spec: {phrase})"
    if required:
        assert name in schema.get("required", []), f"{model.__name__}.{name} must be required"
    node = _resolve(schema, props[name])
    json_type, extra = _kind(phrase)
    if json_type == "object" and "const" in node:
        return
    got = node.get("type", "object" if "properties" in node or "additionalProperties" in node
                   else None)
    if json_type == "number":
        assert got in ("number",), f"{model.__name__}.{name}: {got} != number"
    else:
        assert got == json_type or (got is None and json_type == "object"), (
            f"{model.__name__}.{name}: schema type {got!r}, spec says {phrase!r}"
        )
    if json_type == "array" and extra is not None:
        item = _resolve(schema, node.get("items", {}))
        item_type = item.get("type", "object")
        assert item_type == extra, f"{model.__name__}.{name} items {item_type} != {extra}"
        if "uuid" in phrase.lower():
            assert item.get("format") == "uuid", f"{model.__name__}.{name} items must be UUIDs"
    if json_type == "string" and extra in ("uuid", "date-time"):
        assert node.get("format") == extra, f"{model.__name__}.{name} should be {extra}"


def _table(heading: str) -> list[list[str]]:
    """Rows (cells) of the first markdown table after ``heading``."""
    start = TEXT.index(heading)
    rows = []
    for line in TEXT[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return [r for r in rows[2:]]


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [x.strip() for x in [*parts, cur] if x.strip()]


def test_vendored_spec_matches_shared() -> None:
    """docs/spec is the team's contract, byte for byte."""
    if not SHARED.exists():
        pytest.skip("no shared/ beside this checkout")
    assert SPEC.read_text() == SHARED.read_text()


def test_envelope_fields() -> None:
    """Every envelope field is in the model with its type and required-ness."""
    rows = _table("### Message envelope")
    assert len(rows) == 8
    for name, phrase, required, _meaning in rows:
        _check_field(Envelope, name, phrase, required=required == "yes")
    gps = _schema(GpsDataEvent)
    assert "server_ts" not in gps.get("required", []), "gps_data may omit server_ts"


@pytest.mark.parametrize(
    ("heading", "model"),
    [("**Offer (in `offers`)**", p.Offer), ("**Node (in `assignment`)**", p.Node),
     ("**Edge (in `assignment`)**", p.Edge)],
)
def test_object_tables(heading: str, model: type[Any]) -> None:
    """Offer, Node and Edge have every field of their tables."""
    for row in _table(heading):
        for name in (n.strip() for n in row[0].split(",")):
            _check_field(model, name, row[1])


@pytest.mark.parametrize(
    ("prefix", "model"),
    [("**Booking (in `bookings`)**:", p.Booking),
     ("**Vehicle state (in `vehicle_states`)**:", p.VehicleState),
     ("**Ticket (in `demand_modification`)**:", p.Ticket)],
)
def test_inline_objects(prefix: str, model: type[Any]) -> None:
    """Booking, Vehicle state and Ticket have the fields listed inline."""
    line = next(line for line in TEXT.splitlines() if line.startswith(prefix))
    body = line[len(prefix):].split(". ")[0]
    fields = re.findall(r"(\w+) \(([^)]*)\)", body)
    assert fields
    for name, phrase in fields:
        _check_field(model, name, phrase)


def test_events_table_payloads() -> None:
    """Each of the 18 types has a model, and its payload every listed field."""
    rows = _table("## Events")
    assert {r[0] for r in rows} == {t.value for t in MessageType}
    for message_type, _trigger, _agent, _transmit, fields in rows:
        model = PAYLOAD_MODELS[MessageType(message_type)]
        assert EVENT_MODELS[MessageType(message_type)].model_fields["message_type"]
        for part in _split_top(fields, ";"):
            names, _, phrase = part.partition(":")
            for name in (n.strip() for n in names.split(",")):
                _check_field(model, name, phrase)
            if " with " in phrase and phrase.strip().startswith(("object", "array of objects")):
                nested = _resolve(_schema(model), _schema(model)["properties"][names.strip()])
                if nested.get("type") == "array":
                    nested = _resolve(_schema(model), nested["items"])
                inner = phrase.split(" with ", 1)[1]
                for sub, sub_phrase in re.findall(r"(\w+) \(([^,)]*)", inner):
                    assert sub in nested["properties"], f"{message_type}: {names}.{sub} missing"
                    if sub_phrase.strip() in ("integer", "string", "timestamp", "object"):
                        want = "string" if sub_phrase.strip() == "timestamp" else sub_phrase
                        got = _resolve(_schema(model), nested["properties"][sub])
                        assert got.get("type", "object") == want.strip(), (
                            f"{message_type}: {names}.{sub} is {got.get('type')}"
                        )
