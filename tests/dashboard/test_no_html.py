"""No event field becomes HTML in the dashboard (issue 50), in a real browser.

Events are ingested into the demo's simulation with ``<img src=x onerror=...>`` in every
string field the store accepts, each in its own event. Every tooltip of the map is made
permanent (opened as soon as its marker is drawn), so that whatever Leaflet would render
as HTML is rendered. Then no element of the payload exists in the page, and the payload
shows as text where the dashboard shows that field.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ridecast.events.examples import all_examples
from tests.dashboard.test_browser import Demo, sign_in_from_link
from tests.waiting import eventually

pytestmark = pytest.mark.browser

PAYLOAD = '<img src=x data-injected=1 onerror="window.__injected=1">'

# Leaflet assigns ``window.L`` and then fills it; once filled (the next microtask), every
# tooltip bound is made permanent, so it opens when its marker is drawn.
OPEN_EVERY_TOOLTIP = """
(() => {
  let leaflet;
  Object.defineProperty(window, "L", { configurable: true, get: () => leaflet, set(value) {
    leaflet = value;
    queueMicrotask(() => {
      const bind = value.Layer.prototype.bindTooltip;
      value.Layer.prototype.bindTooltip = function (content, options) {
        return bind.call(this, content, Object.assign({}, options, { permanent: true }));
      };
    });
  }});
})();
"""


def _string_paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _string_paths(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _string_paths(child, (*path, i))


def _with(event: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    out = copy.deepcopy(event)
    holder = out
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = PAYLOAD
    return out


def test_no_event_field_becomes_html(page: Any, demo: Demo) -> None:
    """Every string field of every event type, hostile: no element is created from it."""
    process, printed = demo
    page.add_init_script(OPEN_EVERY_TOOLTIP)
    sign_in_from_link(page, printed)
    sim = int(re.search(r"sim=(\d+)", printed.dashboard_url)[1])  # type: ignore[index]
    env = printed.export_env()
    accepted: list[tuple[str, tuple[Any, ...]]] = []
    with httpx.Client(base_url=process.base_url, timeout=30,
                      auth=(env["RIDECAST_USER"], env["RIDECAST_API_KEY"])) as http:
        for event in all_examples(sim):
            if isinstance(event["data"].get("vehicle_id"), int):
                # A vehicle the demo does not run: its next assignment would redraw the
                # nodes of this one before the test sees them.
                event["data"]["vehicle_id"] = 987_654
            for path in _string_paths(event):
                if path == ("message_type",):
                    continue  # the type picks the handler: a hostile one is refused
                response = http.post(f"/api/v2/simulation/{sim}/events",
                                     json=_with(event, path))
                assert response.status_code in (201, 400), response.text
                if response.status_code == 201:
                    accepted.append((event["message_type"], path))
            # Last, every accepted field of the type at once: what the map keeps is the
            # latest event of a vehicle or node, and it then holds every payload.
            hostile = copy.deepcopy(event)
            for kind, path in accepted:
                if kind == event["message_type"]:
                    hostile = _with(hostile, path)
            response = http.post(f"/api/v2/simulation/{sim}/events", json=hostile)
            assert response.status_code == 201, response.text
    kinds = {kind for kind, _path in accepted}
    assert {"assignment", "bookings", "node_status"} <= kinds, kinds
    assert ("assignment", ("data", "nodes", 0, "node_type")) in accepted, accepted
    # The node drawn from the hostile assignment: its tooltip is open, its text the payload.
    eventually(lambda: page.evaluate(
          "[...document.querySelectorAll('.leaflet-tooltip')]"
          ".some(t => t.textContent.includes('<img src=x'))"), timeout=30,
          why=lambda: "the hostile node's tooltip to be drawn, as text; tooltips: " + str(
              page.evaluate("[...document.querySelectorAll('.leaflet-tooltip')]"
                            ".slice(0, 5).map(t => t.innerHTML)")))
    eventually(lambda: page.get_by_test_id("feed-item").count() > 0, timeout=30,
               what="the feed to fill")
    injected = page.evaluate(
        "document.querySelectorAll('[data-injected], img[src=\"x\"]').length")
    assert injected == 0, "an event field became HTML"
    assert page.evaluate("window.__injected") is None
    assert page.errors == []
