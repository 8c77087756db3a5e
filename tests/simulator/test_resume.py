"""``AlreadyPublished``: a rebuilt run publishes exactly the events not yet published.

Hypothesis draws the run's stream, how far it was committed (k), how far the last progress
record said (c <= k), the other producers' events mixed into the log's tail, and how the
rebuilt run cuts its stream into batches: what passes the filter is always events[k:].
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ridecast.simulator.hosting.resume import AlreadyPublished, Progress, as_produced


def _event(n: int) -> dict[str, Any]:
    return {"simulation_id": 1, "agent_type": "vehicle", "message_type": "gps_data",
            "data": {"vehicle_id": n % 3, "lat": 57.0 + n / 1000, "lon": 11.9},
            "current_sim_ts": f"2024-01-01T08:00:{n % 60:02d}.000+00:00",
            "transmit_to_websocket": True}


def _foreign(n: int) -> dict[str, Any]:
    return {"simulation_id": 1, "agent_type": "operator", "message_type": "vehicle_use",
            "data": {"vehicle_id": n, "action": "enabled"},
            "current_sim_ts": "2024-01-01T08:00:00.000+00:00", "transmit_to_websocket": True}


@given(data=st.data(), total=st.integers(0, 60))
def test_exactly_the_unpublished_events_pass(data: st.DataObject, total: int) -> None:
    """Whatever the split, the foreign events and the batches: events[k:] pass, in order,
    and the progress ends at the whole stream and the tail's last event of the run."""
    events = [_event(n) for n in range(total)]
    committed = data.draw(st.integers(0, total), label="committed")
    recorded = data.draw(st.integers(0, committed), label="recorded")
    tail: list[tuple[int, dict[str, Any]]] = []
    next_id = 1000
    for event in events[recorded:committed]:
        for n in range(data.draw(st.integers(0, 2))):
            tail.append((next_id, {**_foreign(n), "server_ts": "x"}))
            next_id += 1
        tail.append((next_id, {**event, "server_ts": "x", "event_id": str(next_id)}))
        next_id += 1
    filt = AlreadyPublished(Progress(recorded, 999), tail)
    passed: list[dict[str, Any]] = []
    k = 0
    while k < total:
        size = data.draw(st.integers(1, 9))
        passed += filt.filter(events[k:k + size])
        k += size
    assert passed == events[committed:]
    if committed < total:
        assert filt.done
    assert filt.count == committed
    run_ids = [event_id for event_id, body in tail if body["agent_type"] == "vehicle"]
    assert filt.last_id == (run_ids[-1] if run_ids else 999)


def test_as_produced_takes_off_what_the_log_stamped() -> None:
    """server_ts and event_id go; everything else stays."""
    body = {**_event(1), "server_ts": "2026-01-01T00:00:00+00:00", "event_id": "7"}
    assert as_produced(body) == _event(1)
