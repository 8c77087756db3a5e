"""Dispatch quality: ridecast's online dispatcher against an offline optimum of the same day.

Each instance is one seeded ridecast run on the bundled Gothenburg network (flat demand and
congestion, every offer accepted, no no-shows, cancellations, demand changes, breaks or
rebalancing: only the dispatcher decides). The same requests (times, points, riders),
fleet start points, pickup windows (request time to ``max_wait_s`` later), ride limits
(``max_detour_factor`` x direct time + dwell), dwell and seats then make a prize-collecting
pickup-and-delivery problem with time windows, which OR-Tools' routing solver solves knowing
every request in advance, with travel times from ridecast's own network model:

- every request is optional at a prize larger than any route's cost, so the solver first
  serves as many requests as it can, then drives as little as it can (arc cost: seconds of
  driving, the scheduler's own measure; kilometres are read off the routes afterwards);
- the search starts from ridecast's executed routes (each vehicle's stops in the order it
  served them), so the offline solution is never worse than the online one;
- it stops after ``--solutions`` solutions of guided local search, never at a time limit,
  so that the figures do not depend on the machine. The search is deterministic and still
  improves at the default of 1,000: a longer one ends at a solution at least as good (more
  riders, or as many with less driving time), so SR never rises; KR has fallen with every
  longer search measured (docs/simulator.md).

``--reference no-prepositioning`` takes one piece of foresight away from the offline solution:
a vehicle leaves for a pickup only once that pickup is requested (it may still wait where it
is, and it still knows which requests will come). Any dispatcher that only answers requests
(rebalancing off) is bound by that too, so this reference tells how much of the gap to the
clairvoyant one is pre-positioning. Its search starts from ridecast's executed routes less
the bookings ridecast reached by turning a vehicle already on its way (a turn mid-leg has no
place in a model of stops), so it is never worse than ridecast on the bookings that remain.

Printed per instance and as means: served requests, vehicle-km per served request, mean wait,
mean ride/direct, for ridecast and offline, then SR (served, ridecast / offline) and KR
(vehicle-km per served request, offline / ridecast). The offline solution knows the future:
1.0 is a ceiling that no online dispatcher reaches.

    python bench/dispatch_quality.py --vehicles 5 --rate 40 --seeds 1,2,3 --json out.json
    python bench/dispatch_quality.py --vehicles 5 --rate 40 --seeds 1,2,3 \
        --reference no-prepositioning
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ortools.constraint_solver import pywrapcp, routing_enums_pb2

from ridecast.simulator import Engine, SimulatorSettings
from ridecast.simulator.core.model import BookingStatus

START = datetime(2024, 5, 6, 10, 0, tzinfo=UTC)
#: Times in the solver are integers of this many seconds.
TICK_S = 0.1
#: Windows and ride limits are widened by this much in the solver: times rounded to ticks
#: along a route must not make ridecast's own executed routes infeasible.
SLACK_S = 2.0
#: The prize of one request, in ticks: far above any route's driving time, so serving one
#: more request always beats any saving in driving.
PRIZE = 10**9


@dataclass
class Result:
    served: int
    vehicle_km: float
    waits: list[float]
    detours: list[float]

    def row(self) -> dict[str, Any]:
        return {"served": self.served,
                "km_per_served": self.vehicle_km / self.served if self.served else None,
                "vehicle_km": round(self.vehicle_km, 3),
                "wait_mean_s": statistics.fmean(self.waits) if self.waits else None,
                "ride_over_direct_mean": statistics.fmean(self.detours)
                if self.detours else None}


def settings_for(args: argparse.Namespace, seed: int) -> SimulatorSettings:
    return SimulatorSettings.model_validate({
        "seed": seed, "vehicles": args.vehicles, "capacity": 4,
        "bookings_per_hour": args.rate, "duration_s": args.hours * 3600.0,
        "demand_profile": [1.0] * 24, "congestion_profile": [1.0] * 24,
        "congestion_noise": 0.0, "speed": "max", "start_ts": START.isoformat(),
        "area": {"lat": 57.705, "lon": 11.963, "radius_m": args.radius_m},
        "network": "gothenburg", "max_wait_s": 600.0, "max_detour_factor": 1.8,
        "dwell_s": 20.0, "acceptance_probability": 1.0, "acceptance_model": "flat",
        "no_show_probability": 0.0,
        "cancellation_probability": 0.0, "demand_change_probability": 0.0,
        "vehicle_break_probability": 0.0, "rebalance_interval_s": 0.0,
        "performance_tracker_enabled": False, **args.extra,
    })


def run_ridecast(settings: SimulatorSettings) -> tuple[Engine, list[Any], Result,
                                                        list[list[tuple[int, int]]]]:
    """The online run; returns the engine, the fleet's start points, ridecast's result and
    each vehicle's executed stops as (booking index, 0 pickup / 1 dropoff)."""
    engine = Engine(1, settings, START)
    engine.keep_finished_s = math.inf  # every booking of the run is read afterwards
    starts = [engine.vehicles[vid].anchor for vid in sorted(engine.vehicles)]
    while not engine.finished:
        engine.advance(engine.now + 600.0)
    bookings = [engine.bookings[k] for k in sorted(engine.bookings)]
    dwell = settings.dwell_s
    waits, detours = [], []
    stops: dict[int, list[tuple[float, int, int]]] = {vid: [] for vid in engine.vehicles}
    for k, b in enumerate(bookings):
        if b.status is not BookingStatus.COMPLETED:
            continue
        assert b.picked_up_t is not None and b.dropped_off_t is not None
        assert b.vehicle_id is not None
        waits.append(b.picked_up_t - dwell - b.requested_t)
        detours.append((b.dropped_off_t - b.picked_up_t) / b.direct_s)
        stops[b.vehicle_id].append((b.picked_up_t - dwell, 0, k))
        stops[b.vehicle_id].append((b.dropped_off_t, 1, k))
    routes = [[(k, kind) for _, kind, k in sorted(stops[vid])] for vid in sorted(stops)]
    km = sum(v.vehicle_m for v in engine.vehicles.values()) / 1000.0
    return engine, starts, Result(len(waits), km, waits, detours), routes


def solve_offline(engine: Engine, starts: list[Any], seed_routes: list[list[tuple[int, int]]],
                  solutions: int, prepositioning: bool = True) -> Result:
    """The prize-collecting PDPTW of the module docstring, started from ``seed_routes``;
    without ``prepositioning``, no vehicle leaves for a pickup before it is requested."""
    s = engine.settings
    travel = engine.travel
    bookings = [engine.bookings[k] for k in sorted(engine.bookings)]
    n_veh = len(starts)
    # Nodes: the vehicles' starts, one end per vehicle (anywhere: free to reach), then each
    # request's pickup and dropoff.
    points = list(starts) + [None] * n_veh
    for b in bookings:
        points += [b.pickup, b.dropoff]
    first_req = 2 * n_veh
    n = len(points)
    ticks = [[0] * n for _ in range(n)]
    for i, a in enumerate(points):
        if a is None:
            continue
        row = ticks[i]
        for j, c in enumerate(points):
            if c is not None and i != j:
                row[j] = round(travel.duration_s(a, c) / TICK_S)
    dwell = round(s.dwell_s / TICK_S)
    manager = pywrapcp.RoutingIndexManager(n, n_veh, list(range(n_veh)),
                                           list(range(n_veh, 2 * n_veh)))
    routing = pywrapcp.RoutingModel(manager)

    # The arc costs and times as matrices and the loads as a vector: evaluated inside the
    # solver, not by a Python callback per arc (the search is the same, several times faster).
    timed = [[t + (dwell if a >= first_req and points[c] is not None else 0)
              for c, t in enumerate(row)] for a, row in enumerate(ticks)]
    loads = [0] * first_req
    for b in bookings:
        loads += [b.passengers, -b.passengers]
    routing.SetArcCostEvaluatorOfAllVehicles(routing.RegisterTransitMatrix(ticks))
    horizon = round((s.duration_s + 4 * 3600.0) / TICK_S)
    routing.AddDimension(routing.RegisterTransitMatrix(timed), horizon, horizon, False, "t")
    time_dim = routing.GetDimensionOrDie("t")
    routing.AddDimensionWithVehicleCapacity(routing.RegisterUnaryTransitVector(loads), 0,
                                            [s.capacity] * n_veh, True, "seats")
    solver = routing.solver()
    slack = round(SLACK_S / TICK_S)
    for v in range(n_veh):
        time_dim.CumulVar(routing.Start(v)).SetRange(0, 0)
    for k, b in enumerate(bookings):
        p = manager.NodeToIndex(first_req + 2 * k)
        d = manager.NodeToIndex(first_req + 2 * k + 1)
        routing.AddPickupAndDelivery(p, d)
        solver.Add(routing.VehicleVar(p) == routing.VehicleVar(d))
        earliest = round(b.requested_t / TICK_S)
        time_dim.CumulVar(p).SetRange(earliest,
                                      round(b.latest_pickup_t / TICK_S) + slack)
        ride = round(b.max_ride_s / TICK_S) + slack
        # Ride = arrival at the dropoff - departure from the pickup (after its dwell).
        solver.Add(time_dim.CumulVar(d) - time_dim.CumulVar(p) - dwell <= ride)
        solver.Add(time_dim.CumulVar(p) + dwell <= time_dim.CumulVar(d))
        routing.AddDisjunction([p], PRIZE)
        routing.AddDisjunction([d], PRIZE)

    requested = [0] * n
    for k, b in enumerate(bookings):
        requested[first_req + 2 * k] = round(b.requested_t / TICK_S)
    if not prepositioning:
        # Leaving a node (after its dwell and any wait there) not before the next node's
        # request: the wait happens where the vehicle is, not at the pickup.
        after = [requested[manager.IndexToNode(i)] if not routing.IsStart(i) else 0
                 for i in range(routing.Size())] + [0] * n_veh
        for i in range(routing.Size()):
            leave = (time_dim.CumulVar(i) + time_dim.SlackVar(i)
                     + (dwell if manager.IndexToNode(i) >= first_req else 0))
            solver.Add(leave >= solver.Element(after, routing.NextVar(i)))
        seed_routes = [_answering_only(route, v, ticks, requested, bookings, first_req, dwell)
                       for v, route in enumerate(seed_routes)]
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = (
        routing_enums_pb2.FirstSolutionStrategy.PARALLEL_CHEAPEST_INSERTION)
    params.local_search_metaheuristic = (
        routing_enums_pb2.LocalSearchMetaheuristic.GUIDED_LOCAL_SEARCH)
    params.solution_limit = solutions
    seed = [[manager.NodeToIndex(first_req + 2 * k + kind) for k, kind in route]
            for route in seed_routes]
    routing.CloseModelWithParameters(params)
    initial = routing.ReadAssignmentFromRoutes(seed, True)
    if initial is None:
        raise SystemExit("ridecast's executed routes are infeasible in the offline model")
    solution = routing.SolveFromAssignmentWithParameters(initial, params)
    if solution is None:
        solution = initial
    served, km, waits, detours = 0, 0.0, [], []
    for v in range(n_veh):
        index = routing.Start(v)
        prev = points[v]
        picked: dict[int, float] = {}
        while not routing.IsEnd(index):
            index = solution.Value(routing.NextVar(index))
            node = manager.IndexToNode(index)
            if node < first_req:
                continue
            k, kind = divmod(node - first_req, 2)
            b = bookings[k]
            at = solution.Min(time_dim.CumulVar(index)) * TICK_S
            km += travel.distance_m(prev, points[node]) / 1000.0
            prev = points[node]
            if kind == 0:
                picked[k] = at + s.dwell_s
                waits.append(at - b.requested_t)
            else:
                served += 1
                detours.append((at - picked[k]) / b.direct_s)
    return Result(served, km, waits, detours)


def _answering_only(route: list[tuple[int, int]], vehicle: int, ticks: list[list[int]],
                    requested: list[int], bookings: list[Any], first_req: int,
                    dwell: int) -> list[tuple[int, int]]:
    """``route`` less the bookings it cannot keep when a vehicle leaves for a pickup only
    once it is requested (those ridecast reached by turning a vehicle on its way, and any
    that then come too late), dropped one at a time, first broken first."""
    slack = round(SLACK_S / TICK_S)
    while True:
        node, t, picked, broken = vehicle, 0, {}, None
        for k, kind in route:
            nxt = first_req + 2 * k + kind
            leave = t + (dwell if node >= first_req else 0)
            t = max(leave, requested[nxt]) + ticks[node][nxt]
            b = bookings[k]
            if kind == 0:
                if t > round(b.latest_pickup_t / TICK_S) + slack:
                    broken = k
                    break
                picked[k] = t
            elif t - picked[k] - dwell > round(b.max_ride_s / TICK_S) + slack:
                broken = k
                break
            node = nxt
        if broken is None:
            return route
        route = [(k, kind) for k, kind in route if k != broken]


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vehicles", type=int, default=5)
    parser.add_argument("--rate", type=float, default=40.0, help="requests per hour")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--radius-m", type=float, default=3000.0)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--solutions", type=int, default=1000,
                        help="the offline search stops after this many solutions (the "
                        "longer the search, the stronger the reference: see "
                        "docs/simulator.md)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="another simulator setting for ridecast's run, e.g. "
                        "reoptimise_interval_s=0")
    parser.add_argument("--reference", choices=("clairvoyant", "no-prepositioning"),
                        default="clairvoyant",
                        help="the offline solution knows every request in advance; "
                        "no-prepositioning: a vehicle still leaves for a pickup only once "
                        "it is requested")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    args.extra = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    instances = []
    print(f"dispatch quality: {args.vehicles} vehicles, {args.rate:g} requests/h, "
          f"{args.hours:g} h, radius {args.radius_m:g} m, offline search "
          f"{args.solutions} solutions, reference {args.reference}")
    print(f"{'seed':>4} {'req':>4} | {'served':>6} {'km/srv':>7} {'wait':>6} {'r/d':>5} | "
          f"{'offline':>7} {'km/srv':>7} {'wait':>6} {'r/d':>5} | {'SR':>5} {'KR':>5} "
          f"{'solve s':>7}")
    for seed in (int(x) for x in args.seeds.split(",")):
        engine, starts, online, routes = run_ridecast(settings_for(args, seed))
        began = time.perf_counter()
        offline = solve_offline(engine, starts, routes, args.solutions,
                                prepositioning=args.reference == "clairvoyant")
        took = time.perf_counter() - began
        on, off = online.row(), offline.row()
        sr = online.served / offline.served if offline.served else None
        kr = (off["km_per_served"] / on["km_per_served"]
              if on["km_per_served"] and off["km_per_served"] else None)
        instances.append({"seed": seed, "requests": len(engine.bookings), "ridecast": on,
                          "offline": off, "served_ratio": sr, "km_ratio": kr,
                          "solve_s": round(took, 2)})
        print(f"{seed:>4} {len(engine.bookings):>4} | {on['served']:>6} "
              f"{fmt(on['km_per_served']):>7} {fmt(on['wait_mean_s'], 0):>6} "
              f"{fmt(on['ride_over_direct_mean'], 2):>5} | {off['served']:>7} "
              f"{fmt(off['km_per_served']):>7} {fmt(off['wait_mean_s'], 0):>6} "
              f"{fmt(off['ride_over_direct_mean'], 2):>5} | {fmt(sr)} {fmt(kr)} "
              f"{took:>7.1f}", flush=True)
    srs = [i["served_ratio"] for i in instances if i["served_ratio"] is not None]
    krs = [i["km_ratio"] for i in instances if i["km_ratio"] is not None]
    mean_sr = statistics.fmean(srs) if srs else None
    mean_kr = statistics.fmean(krs) if krs else None
    print(f"mean: SR {fmt(mean_sr)}  KR {fmt(mean_kr)}  over {len(instances)} instances")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"vehicles": args.vehicles, "rate": args.rate, "hours": args.hours,
                       "radius_m": args.radius_m, "solutions": args.solutions,
                       "reference": args.reference,
                       "settings": args.extra, "instances": instances,
                       "mean_served_ratio": mean_sr, "mean_km_ratio": mean_kr}, out, indent=1)


if __name__ == "__main__":
    main()
