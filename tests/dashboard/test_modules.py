"""The dashboard's pure ES modules, run in the browser and checked against the Python side."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ridecast.errors import ERRORS
from ridecast.events.examples import all_examples
from ridecast.simulator.core.engine import Engine
from ridecast.simulator.core.polyline import decode, encode
from ridecast.simulator.core.settings import SimulatorSettings
from tests.conftest import Server
from tests.dashboard.conftest import local_only

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def js(server: Server, browser: Any) -> Iterator[Any]:
    """A page on a ridecast origin, to import the dashboard's modules from (the server
    first: it is set up with asyncio.run, which must not meet Playwright's loop)."""
    context = browser.new_context()
    page = context.new_page()
    local_only(page, server.base_url)
    page.goto(server.base_url + "/")
    yield page
    context.close()


points = st.lists(
    st.tuples(st.floats(-89.99999, 89.99999), st.floats(-179.99999, 179.99999)),
    min_size=0, max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(points)
def test_polyline_decoder_agrees_with_the_python_one(
    js: Any, line: list[tuple[float, float]]
) -> None:
    """decodePolyline(text) in the browser equals the simulator's decode(text)."""
    text = encode(line)
    got = js.evaluate(
        "async (text) => (await import('/dashboard/js/polyline.js')).decodePolyline(text)", text)
    assert [tuple(p) for p in got] == decode(text)


def test_polyline_decoder_refuses_broken_input(js: Any) -> None:
    """A truncated polyline or a character outside the alphabet throws instead of drawing."""
    outcome = js.evaluate("""async () => {
        const { decodePolyline, joinEdges } = await import('/dashboard/js/polyline.js');
        const fails = (text) => {
            try { decodePolyline(text); return false; } catch { return true; }
        };
        return [fails('_p~iF~ps|'), fails('_p~iF~ps|U '), joinEdges([{polyline5: '_p~'},
                {polyline5: '_p~iF~ps|U'}, {polyline5: '_p~iF~ps|U_ulLnnqC'}])];
    }""")
    assert outcome[0] is True and outcome[1] is True
    assert outcome[2] == [[38.5, -120.2], [40.7, -120.95]]


def test_close_codes_of_the_error_table_map_to_a_reconnect_policy(js: Any) -> None:
    """Every websocket close code in errors.py gets the action its range promises."""
    codes = {spec.code: spec.ws_close_code for spec in ERRORS.values() if spec.ws_close_code}
    actions = js.evaluate("""async (codes) => {
        const { closeAction } = await import('/dashboard/js/stream.js');
        return Object.fromEntries(Object.entries(codes).map(([k, c]) => [k, closeAction(c)]));
    }""", codes)
    for code, close in codes.items():
        if code in ("not_authenticated", "token_malformed", "token_unknown", "token_expired"):
            assert actions[code] == "reauth", code
        elif code in ("cursor_expired", "invalid_cursor"):
            assert actions[code] == "reset", code
        elif 4000 <= close < 4100:
            assert actions[code] == "fatal", code
        else:
            assert actions[code] == "retry", code


def test_backoff_doubles_with_jitter_up_to_a_ceiling(js: Any) -> None:
    """Reconnect delays grow 0.5 s, 1 s, 2 s... to 15 s, each jittered within [half, full]."""
    low, high = js.evaluate("""async () => {
        const { backoffMs } = await import('/dashboard/js/stream.js');
        const run = (r) => [...Array(12).keys()].map((a) => backoffMs(a, () => r));
        return [run(0), run(0.999999)];
    }""")
    ceilings = [min(15000, 500 * 2**a) for a in range(12)]
    assert high == ceilings
    assert low == [c // 2 for c in ceilings]


def test_every_event_type_applies_and_reads_as_a_sentence(js: Any) -> None:
    """The examples of all 18 types go through the fleet model and each has a feed summary."""
    result = js.evaluate("""async (events) => {
        const { FleetState } = await import('/dashboard/js/state.js');
        const { summarize } = await import('/dashboard/js/format.js');
        const state = new FleetState();
        for (const e of events) state.apply(e, 1000);
        return { summaries: events.map((e) => [e.message_type, summarize(e)]),
                 vehicles: state.vehicles.size, summary: state.summary(1000) };
    }""", all_examples(1))
    for message_type, text in result["summaries"]:
        assert text, f"{message_type} has no summary"
    assert result["vehicles"] >= 1


def test_fleet_model_follows_a_simulated_hour(js: Any) -> None:
    """Fed a simulated hour, the model ends with the engine's fleet, in its final places,
    and no route node of a finished booking still waiting."""
    engine = Engine(1, SimulatorSettings(seed=3, vehicles=6, bookings_per_hour=60,
                                         gps_interval_s=5, snapshot_interval_s=60),
                    datetime(2026, 1, 1, tzinfo=UTC))
    events = engine.advance(3600.0)
    last_snapshot = max(i for i, e in enumerate(events) if e["message_type"] == "vehicle_states")
    # Cut at the last snapshot, so that it holds everyone's final position.
    events = events[: last_snapshot + 1]
    result = js.evaluate("""async (events) => {
        const { FleetState } = await import('/dashboard/js/state.js');
        const state = new FleetState();
        for (const e of events) state.apply(e, 0);
        return { positions: [...state.vehicles.values()].map((v) => [v.id, v.lat, v.lon]),
                 nodes: [...state.nodes.values()].map((n) => [n.bookingId, n.status]) };
    }""", events)
    snapshot = events[-1]["data"]["vehicle_states"]
    assert sorted(result["positions"]) == sorted(
        [s["id"], s["lat"], s["lon"]] for s in snapshot)
    waiting = {s["id"]: {n["booking_id"] for n in s["current_route"]} for s in snapshot}
    still_assigned = {booking for booking, status in result["nodes"] if status == "assigned"}
    assert still_assigned <= set().union(*waiting.values())


def test_webhook_health_reads_failing_only_while_the_newest_attempt_failed(js: Any) -> None:
    """webhookHealth: disabled wins; a failed attempt with no success since is "failing" with
    that attempt's error; a success after the failure, or no attempt yet, is "active"."""
    states = js.evaluate("""async () => {
        const { webhookHealth } = await import('/dashboard/js/panels.js');
        const sim = { messaging_webhook_disabled_at: null };
        const refused = { status: "pending", attempt_count: 2, updated_at: "2026-01-01T10:00:05Z",
          attempts: [{ status_code: null, error_class: "connect", error: "refused" }] };
        const http500 = { status: "failed", attempt_count: 8, updated_at: "2026-01-01T10:00:09Z",
          attempts: [{ status_code: 500, error_class: "http_status", error: "" }] };
        const ok = (t) => ({ status: "succeeded", attempt_count: 1, updated_at: t, attempts: [] });
        const fresh = { status: "pending", attempt_count: 0, updated_at: "2026-01-01T10:00:20Z" };
        const run = (recent, lastSuccess, s = sim) => webhookHealth(s, { recent, lastSuccess });
        return [
          run([refused, fresh], null),
          run([refused, http500], null),
          run([refused], ok("2026-01-01T10:00:01Z")),
          run([refused], ok("2026-01-01T10:00:07Z")),
          run([fresh], null),
          run([refused], null, { messaging_webhook_disabled_at: "x",
                                 messaging_webhook_disabled_reason: "410 Gone" }),
        ];
    }""")
    assert states == [
        {"state": "failing", "error": "connect: refused"},
        {"state": "failing", "error": "HTTP 500"},
        {"state": "failing", "error": "connect: refused"},
        {"state": "active", "error": ""},
        {"state": "active", "error": ""},
        {"state": "disabled", "error": "410 Gone"},
    ]


def test_a_run_starts_where_the_run_module_says_and_a_rerun_is_told_apart(js: Any) -> None:
    """runs.js against the engine: a run's first event, and only it among the first minute's,
    is its snapshot at ``started_sim_ts``; the tracker sees a new start, or a rerun of the same
    start (the event count going down), as another run, and polls of one run as the same."""
    start = datetime(2026, 3, 1, 7, 30, tzinfo=UTC)
    engine = Engine(1, SimulatorSettings(vehicles=4, seed=3), start)
    events = engine.advance(60.0)
    started = engine.timestamp(0.0)
    result = js.evaluate("""async ([events, started]) => {
        const { RunTracker, isRunStart } = await import('/dashboard/js/runs.js');
        const flags = events.map((e) => isRunStart(e, started));
        const t = new RunTracker();
        const status = (start, events) => ({ started_sim_ts: start, settings: { seed: 3 },
                                             kpis: { events } });
        const seen = [t.observe({ status: 'idle', kpis: {} }), t.observe(status(started, 10)),
                      t.observe(status(started, 50)), t.observe(status(started, 7)),
                      t.observe(status('2026-03-01T08:00:00.000+00:00', 9))];
        return { flags, seen, start: t.start };
    }""", [events, started])
    assert result["flags"][0] is True and not any(result["flags"][1:])
    assert result["seen"] == [False, False, False, True, True]
    assert result["start"] == "2026-03-01T08:00:00.000+00:00"
