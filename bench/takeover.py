"""What a simulator takeover costs: rebuilding a run from its seed and journal.

A node that takes a run over replays it from simulated second 0 to where the run was, in
steps of ``runner.CATCH_UP_STEP_S`` as the runner does, and drops the events already published
(``simulator/hosting/resume.py``). This times that replay for the engine alone (the bench's demand:
``--bookings`` over ``--hours``, flat, on the bundled Gothenburg network by default), and the
filter over the replayed events. Reading the journal and the log's tail are single queries
on top (a few ms for a journal of hundreds of entries).

    python bench/takeover.py                              # 500 vehicles, 1 hour
    python bench/takeover.py --vehicles 50 --hours 0.25   # quick
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.hosting.resume import AlreadyPublished, Progress
from ridecast.simulator.hosting.runner import CATCH_UP_STEP_S

START = datetime(2024, 5, 6, 6, 0, tzinfo=UTC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vehicles", type=int, default=500)
    parser.add_argument("--bookings-per-hour", type=float, default=2500.0)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--network", default="gothenburg")
    args = parser.parse_args()
    until = args.hours * 3600.0
    settings = SimulatorSettings(
        seed=1, vehicles=args.vehicles, bookings_per_hour=args.bookings_per_hour,
        duration_s=max(until, 3600.0) + 3600.0, speed="max", network=args.network,
        demand_profile=[1.0] * 24, congestion_profile=[1.0] * 24)
    began = time.perf_counter()
    engine = Engine(1, settings, START)
    built = time.perf_counter()
    published = AlreadyPublished(Progress(10**12, 1))  # every event already published
    count = 0
    while engine.now < until:
        events = engine.advance(min(until, engine.now + CATCH_UP_STEP_S))
        count += len(events)
        published.filter(events)
    done = time.perf_counter()
    bookings = len(engine.bookings)
    print(f"{args.vehicles} vehicles, {bookings} bookings, {args.hours:g} h simulated on "
          f"{args.network}: engine built in {built - began:.2f} s, replayed {count} events "
          f"in {done - built:.2f} s ({until / max(1e-9, done - built):.0f}x real time)")


if __name__ == "__main__":
    main()
