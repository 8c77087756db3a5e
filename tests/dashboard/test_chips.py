"""The feed's type chips, in chromium against a running demo (issue 53): all 18 types from
the first moment, whatever has arrived so far, in the fixed order of docs/dashboard.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ridecast.events import MessageType
from tests.dashboard.test_browser import Demo, sign_in
from tests.waiting import eventually

pytestmark = pytest.mark.browser

FORMAT_JS = (Path(__file__).resolve().parents[2] / "src" / "ridecast" / "dashboard" / "static"
             / "js" / "format.js")


def chip_types(page: Any) -> list[str]:
    types: list[str] = page.eval_on_selector_all(
        "#feed-filters .chip", "els => els.map(e => e.dataset.type)")
    return types


def test_every_type_has_a_chip_in_a_fixed_order(page: Any, demo: Demo) -> None:
    """Shortly after the start the demo has made a few types only; the chips are all 18
    anyway, unseen ones counting 0, in the order of format.js's TYPES, and stay so."""
    order = re.findall(r'\["([a-z_]+)", "#', FORMAT_JS.read_text())
    assert sorted(order) == sorted(t.value for t in MessageType)
    sign_in(page, demo)
    eventually(lambda: page.get_by_test_id("feed-item").count() >= 1, timeout=30, what="a feed row")
    seen = set(page.eval_on_selector_all("[data-testid=feed-item]",
                                         "els => els.map(e => e.dataset.type)"))
    assert chip_types(page) == order
    counts = dict(zip(chip_types(page), page.eval_on_selector_all(
        "#feed-filters .chip b", "els => els.map(e => e.textContent)"), strict=True))
    assert all(counts[t] != "0" for t in seen)
    if len(seen) < len(order):
        assert "0" in counts.values()
    eventually(lambda: page.get_by_test_id("feed-item").count() >= 20, timeout=30,
               what="20 feed rows")
    assert chip_types(page) == order
