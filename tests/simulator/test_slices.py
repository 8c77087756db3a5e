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
    assert order == ["a0", "b1", "a1", "a2", "a3"]


def test_a_group_keeps_its_turn_while_its_next_step_is_on_the_way() -> None:
    """A run's next step reaches the queue only after its last one was answered. Two runs
    of one organisation and one of another, each stepping again one request late: the lone
    run still gets half the turns (a plain round-robin of the groups present gave it a
    third: a share per run)."""
    queue = SliceQueue()
    runs = {1: "many", 2: "many", 3: "one"}
    for key, group in runs.items():
        queue.push(Request(key, "advance", key, urgent=False, group=group))
    served = {"many": 0, "one": 0}
    late: Request | None = None
    for req_id in range(10, 610):
        request = queue.pop()
        queue.served(request, 0.02)
        served[request.group] += 1
        if late is not None:  # the step answered before this one comes back now
            queue.push(late)
        late = Request(req_id, "advance", request.key, urgent=False, group=request.group)
    assert abs(served["one"] - served["many"]) <= 2, served


def test_groups_are_charged_the_cpu_their_steps_took() -> None:
    """An organisation whose steps cost twice as much CPU gets half as many of them."""
    queue = SliceQueue()
    cost = {"heavy": 0.04, "light": 0.02}
    for key, group in enumerate(cost):
        queue.push(Request(key, "advance", key, urgent=False, group=group))
    served = {"heavy": 0, "light": 0}
    for req_id in range(10, 310):
        request = queue.pop()
        queue.served(request, cost[request.group])
        served[request.group] += 1
        queue.push(Request(req_id, "advance", request.key, urgent=False,
                           group=request.group))
    assert abs(served["light"] - 2 * served["heavy"]) <= 3, served


async def test_the_publish_lane_is_fair_by_organisation_when_runs_come_back_late() -> None:
    """Runs that publish batch after batch, each coming back to the lane a moment after its
    turn (as a run does between two batches): the lone run of one organisation publishes
    as much as the two runs of the other together. Each batch takes exactly a millisecond
    of the lane's clock, so the shares do not depend on a loaded machine's timers."""
    now = [0.0]
    lane = PublishLane(1.0, clock=lambda: now[0])
    done: dict[str, int] = {"many": 0, "one": 0}
    stop = asyncio.Event()

    async def publish(group: str) -> None:
        while not stop.is_set():
            async with lane.turn(group):
                await asyncio.sleep(0)  # the loop turns while a batch is published
                now[0] += 0.001
                done[group] += 1
            await asyncio.sleep(0)  # back a moment later
            if sum(done.values()) >= 300:
                stop.set()

    await asyncio.gather(publish("many"), publish("many"), publish("one"))
    assert abs(done["one"] - done["many"]) <= 0.15 * done["many"], done
