"""Test helpers: a recording receiver, event factories, and waiting without sleeping blindly."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from ridecast.cli.receiver import Reply, Request

NOW = "2026-11-22T03:00:00+00:00"


def vehicle_use(vehicle_id: int) -> dict[str, Any]:
    return {
        "agent_type": "vehicle", "message_type": "vehicle_use",
        "data": {"vehicle_id": vehicle_id, "action": "disabled"},
        "current_sim_ts": NOW, "transmit_to_websocket": True,
    }


def offer_accepted(offer_id: int) -> dict[str, Any]:
    return {
        "agent_type": "event_publisher", "message_type": "offer_accepted",
        "data": {"offer_id": offer_id}, "current_sim_ts": NOW, "transmit_to_websocket": True,
    }


class Recorder:
    """A receiver handler that records every request; ``behave`` picks the reply."""

    def __init__(self, behave: Callable[[Request, int], Reply] | None = None) -> None:
        self.requests: list[Request] = []
        self.behave = behave
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            n = len(self.requests)
        return self.behave(request, n) if self.behave else Reply(204)

    def ids(self) -> set[str]:
        with self._lock:
            return {r.headers["webhook-id"] for r in self.requests}


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s")


def post_events(http: httpx.Client, sim: int, events: list[dict[str, Any]]) -> list[str]:
    response = http.post(f"/api/v2/simulation/{sim}/events", json=events)
    assert response.status_code == 201, response.text
    return list(response.json()["event_ids"])


def deliveries(http: httpx.Client, sim: int, **params: Any) -> list[dict[str, Any]]:
    response = http.get(f"/api/v2/simulation/{sim}/webhook_deliveries",
                        params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    return list(response.json()["objects"])
