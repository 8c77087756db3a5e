"""The engine process's order of service, its CPU-bounded steps, and the publish lane's
turns (in process)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.hosting.engine_process import Hosted
from ridecast.simulator.hosting.publish_lane import PublishLane
from ridecast.simulator.hosting.slices import Request, SliceQueue

START = datetime(2024, 1, 1, 8, tzinfo=UTC)
SETTINGS = SimulatorSettings(seed=4, vehicles=20, bookings_per_hour=600, duration_s=3600,
                             speed="max")


def _ids(queue: SliceQueue) -> list[int]:
    return [queue.pop().req_id for _ in range(len(queue))]


def test_urgent_requests_go_first() -> None:
    """A real-time step or an operation is served before every waiting max-speed step."""
    queue = SliceQueue()
    for i in range(3):
        queue.push(Request(i, "advance", i, urgent=False, group="a"))
    queue.push(Request(9, "apply", 9, urgent=True, group="b"))
    assert _ids(queue) == [9, 0, 1, 2]


def test_groups_take_turns_whatever_their_number_of_runs() -> None:
    """An organisation with five runs gets one step per round, as one with a single run."""
    queue = SliceQueue()
    for i in range(5):
        queue.push(Request(i, "advance", i, urgent=False, group="many"))
    queue.push(Request(10, "advance", 10, urgent=False, group="one"))
    order = _ids(queue)
    assert order[:2] == [0, 10]
    assert order[2:] == [1, 2, 3, 4]


def test_budgeted_steps_give_the_same_events() -> None:
    """Steps cut short by a tiny CPU budget, replayed until the end, give exactly the
    stream of one unbudgeted advance."""
    hosted = Hosted(Engine(1, SETTINGS, START))
    events = []
    steps = 0
    while not hosted.engine.finished and hosted.engine.now < 1e6:
        answer = hosted.advance(hosted.engine.now + 600.0, [], 1e-5)
        events += answer["events"]
        steps += 1
    assert steps > 20  # the budget cut the steps
    assert events == Engine(1, SETTINGS, START).advance(1e9)


async def test_the_publish_lane_takes_turns_by_organisation() -> None:
    """Three runs of one organisation and one of another, all waiting: the lone run gets
    every second turn, not every fourth."""
    lane = PublishLane(1.0)
    order: list[str] = []
    release = asyncio.Event()

    async def publish(group: str, name: str) -> None:
        async with lane.turn(group):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(publish("a", "a0"))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(publish(g, n))
               for g, n in (("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"))]
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(first, *waiting)
    assert order == ["a0", "a1", "b1", "a2", "a3"]
