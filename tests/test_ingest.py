"""Ingest preparation (no I/O): validation, stamping, serialise once, all or nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridecast.errors import BadRequest
from ridecast.events import MessageType, parse_event_json
from ridecast.events.examples import all_examples, example_event
from ridecast.events.webhook_settings import WebhookSettings
from ridecast.ingest import Ingest
from ridecast.isotime import iso_from_ns
from ridecast.simulations import SimulationMeta

META = SimulationMeta(id=5, org_id=1, owner_id=1, webhook=WebhookSettings(
    url="http://127.0.0.1:9/h", message_types=frozenset({"bookings"})), webhook_disabled=False)


def _ingest() -> Ingest:
    return Ingest(catalog=None, log=None, max_batch=100)  # type: ignore[arg-type]


def test_every_example_is_prepared_and_valid() -> None:
    """All 18 examples pass; bodies parse back to the same event; outbox only where wanted."""
    prepared = _ingest().prepare(META, all_examples(5))
    assert [p.message_type for p in prepared] == [t.value for t in MessageType]
    for item in prepared:
        parse_event_json(item.body)
        assert (item.webhook_url is not None) == (item.message_type == "bookings")


def test_extras_and_formats_are_kept() -> None:
    """Unknown fields and number formats stay as the producer sent them."""
    event = example_event("gps_data", 5)
    event["data"]["accuracy_m"] = 4
    event["data"]["lat"] = 52
    event["x-trace"] = "abc"
    event["event_id"] = "999"
    body = orjson.loads(_ingest().prepare(META, [event])[0].body)
    assert body["data"]["accuracy_m"] == 4 and body["data"]["lat"] == 52
    assert body["x-trace"] == "abc"
    assert "event_id" not in body and "server_ts" not in body
    assert next(iter(body)) == "simulation_id"


def test_disabled_endpoint_gets_no_outbox_rows() -> None:
    """A disabled webhook endpoint stops new deliveries."""
    meta = SimulationMeta(5, 1, 1, META.webhook, webhook_disabled=True)
    assert _ingest().prepare(meta, [example_event("bookings", 5)])[0].webhook_url is None


def test_batch_limit() -> None:
    """More events than the batch limit is a 400 before any validation."""
    with pytest.raises(BadRequest) as info:
        _ingest().prepare(META, [example_event("bookings", 5)] * 101)
    assert info.value.details[0]["max"] == 100


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children,
                                                                       max_size=3),
    max_leaves=8,
)


@settings(max_examples=200)
@given(st.sampled_from([t.value for t in MessageType]), st.sampled_from(["data", "agent_type",
       "current_sim_ts", "transmit_to_websocket", "message_type"]), json_values)
def test_mutated_events_are_accepted_valid_or_refused_precisely(
    message_type: str, key: str, value: Any
) -> None:
    """Replacing any top-level field with any JSON value never crashes ingest.

    Either the event is still valid (then its body re-validates) or every error names its
    index and field with a table code.
    """
    event = example_event(message_type, 5)
    event[key] = value
    try:
        prepared = _ingest().prepare(META, [event])
    except BadRequest as exc:
        assert exc.details
        for detail in exc.details:
            assert detail["index"] == 0
            assert detail["code"] in ("validation_error", "unknown_message_type")
            assert isinstance(detail["field"], str)
    else:
        parse_event_json(prepared[0].body)


def _outcome(event: Any, *, from_json: bool) -> Any:
    try:
        prepared = _ingest().prepare(META, [event], from_json=from_json)
    except BadRequest as exc:
        return ("refused", exc.code, exc.details)
    return ("stored", [(p.message_type, p.webhook_url) for p in prepared])


@settings(max_examples=300)
@given(st.sampled_from([t.value for t in MessageType]), st.sampled_from(["data", "agent_type",
       "current_sim_ts", "server_ts", "transmit_to_websocket", "message_type", "agent_id"]),
       json_values | st.sampled_from(["2024-02-29T06:00:00+00:00", "2024-05-06 06:00:00Z",
                                      "2023-02-29T06:00:00Z", "2024-05-06T06:00:00"]))
def test_the_quick_check_changes_no_answer(message_type: str, key: str, value: Any) -> None:
    """Events parsed from JSON take ``events.quick_check`` first: the same events are
    stored, the same errors given, as through the models alone."""
    event = orjson.loads(orjson.dumps(example_event(message_type, 5)))
    event[key] = value
    try:
        event = orjson.loads(orjson.dumps(event))  # what a POST's parser hands over
    except orjson.JSONEncodeError:  # an integer JSON can hold but orjson cannot
        return
    assert _outcome(event, from_json=True) == _outcome(event, from_json=False)


@given(st.integers(min_value=0, max_value=4_102_444_800 * 10**9))
def test_server_ts_is_written_as_datetime_writes_it(ns: int) -> None:
    """``iso_from_ns`` (per-second cache) agrees with ``datetime.isoformat`` to the character,
    the microseconds floored and left out when zero."""
    expected = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)).isoformat()
    assert iso_from_ns(ns) == expected
    assert iso_from_ns(ns - ns % 10**9) == expected.split(".")[0].removesuffix("+00:00") + "+00:00"
