"""Test helpers: a recording receiver, event factories, real ``ridecast worker`` processes,
and waiting without sleeping blindly."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ridecast.cli.receiver import Reply, Request
from tests.waiting import eventually

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


def start_worker(database_url: str, env: dict[str, str],
                 log: Path | None = None) -> subprocess.Popen[bytes]:
    """A real ``ridecast worker`` on ``database_url`` with ``env`` on top (receivers on
    loopback allowed). Its log goes to ``log`` (appended, at info level, so a test can wait
    for ``worker_running``) or nowhere."""
    full_env = {**os.environ, "RIDECAST_DATABASE_URL": database_url,
                "RIDECAST_WEBHOOK_ALLOW_PRIVATE": "true",
                "RIDECAST_LOG_LEVEL": "info" if log is not None else "warning", **env}
    out = log.open("ab") if log is not None else None
    try:
        return subprocess.Popen([sys.executable, "-m", "ridecast.cli.main", "worker"],
                                env=full_env, stdout=out or subprocess.DEVNULL,
                                stderr=subprocess.STDOUT if out else subprocess.DEVNULL)
    finally:
        if out is not None:
            out.close()  # the child holds its own copy


def worker_running(log: Path, starts: int) -> bool:
    """Whether the worker(s) logging to ``log`` have said ``starts`` times that they run."""
    return log.exists() and log.read_text(errors="replace").count(
        "webhook worker running on") >= starts


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, step: float = 0.05,
             why: Callable[[], str] | None = None) -> None:
    """Wait until ``predicate()``; fail after ``timeout`` s, with ``why()`` in the message."""
    eventually(predicate, timeout=timeout, step=step, why=why)


def post_events(http: httpx.Client, sim: int, events: list[dict[str, Any]]) -> list[str]:
    response = http.post(f"/api/v2/simulation/{sim}/events", json=events)
    assert response.status_code == 201, response.text
    return list(response.json()["event_ids"])


def deliveries(http: httpx.Client, sim: int, **params: Any) -> list[dict[str, Any]]:
    response = http.get(f"/api/v2/simulation/{sim}/webhook_deliveries",
                        params={"limit": 1000, **params})
    assert response.status_code == 200, response.text
    return list(response.json()["objects"])
