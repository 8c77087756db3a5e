"""Helpers of the hub tests: events to post, and websocket clients that collect frames."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.waiting import eventually_async

TYPES = ("vehicle_use", "offer_accepted", "bookings_cancellation")


def envelope(simulation_id: int, message_type: str, n: int = 0, pad: int = 0) -> dict[str, Any]:
    """A valid envelope of one of ``TYPES``; ``pad`` adds booking ids to grow the frame."""
    data: dict[str, Any]
    if message_type == "vehicle_use":
        data = {"vehicle_id": n, "action": "disabled"}
        agent = "vehicle"
    elif message_type == "offer_accepted":
        data = {"offer_id": n}
        agent = "event_publisher"
    else:
        data = {"booking_ids": [n, *range(pad)]}
        agent = "event_publisher"
    return {
        "simulation_id": simulation_id,
        "agent_type": agent,
        "message_type": message_type,
        "data": data,
        "current_sim_ts": "2024-05-01T10:00:00+00:00",
        "transmit_to_websocket": True,
    }


async def post(
    http: httpx.AsyncClient, simulation_id: int, items: list[dict[str, Any]]
) -> list[int]:
    """Ingest ``items`` through the real endpoint; their event ids."""
    response = await http.post(f"/api/v2/simulation/{simulation_id}/events", json=items)
    response.raise_for_status()
    return [int(i) for i in response.json()["event_ids"]]


@dataclass
class Collector:
    """A connected websocket that records every frame it receives, in order."""

    ws: ClientConnection
    frames: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str = ""
    task: asyncio.Task[None] | None = None

    @property
    def ids(self) -> list[int]:
        return [int(f["event_id"]) for f in self.frames]

    async def _run(self) -> None:
        try:
            async for message in self.ws:
                assert isinstance(message, str), "frames must be TEXT"
                self.frames.append(json.loads(message))
        except ConnectionClosed:
            pass
        if self.ws.close_code is not None:
            self.close_code = self.ws.close_code
            self.close_reason = self.ws.close_reason or ""

    async def wait_for(self, count: int, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Until ``count`` frames arrived (or the stream closed, or ``timeout``)."""
        # Callers assert on what came: a timeout here is not the failure.
        with contextlib.suppress(AssertionError):
            await eventually_async(
                lambda: len(self.frames) >= count or self.task is None or self.task.done(),
                timeout=timeout, step=0.01)

    async def wait_closed(self, timeout: float = 10.0) -> int | None:  # noqa: ASYNC109
        assert self.task is not None
        await asyncio.wait_for(asyncio.shield(self.task), timeout)
        return self.close_code

    async def close(self) -> None:
        await self.ws.close()
        if self.task is not None:
            await self.task


async def open_stream(url: str, **kwargs: Any) -> Collector:
    """Connect to ``url`` and start collecting."""
    ws = await connect(url, open_timeout=10, **kwargs)
    collector = Collector(ws)
    collector.task = asyncio.create_task(collector._run())
    return collector


async def refusal(url: str, **kwargs: Any) -> tuple[int | None, str]:
    """Connect, expect the server to close without a frame; its close code and reason."""
    collector = await open_stream(url, **kwargs)
    await collector.wait_closed()
    assert collector.frames == []
    return collector.close_code, collector.close_reason
