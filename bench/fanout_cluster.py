"""Fan-out across a cluster: deliveries/s with one node, then two nodes sharing the
subscribers, on the same PostgreSQL + Redis backend, in one run.

    python bench/fanout_cluster.py                       # 1,000 subscribers, 300 events
    python bench/fanout_cluster.py --subscribers 100 --events 200

Needs PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 (the machine's services).
One publisher posts batches of 50 events to the first node through the real ingest
endpoint; subscribers (picows, in separate processes, as in ``bench/fanout.py``) are all on
the first node, then split half and half between the two nodes, so that every event
reaches the second node over the Redis bus. Reported: deliveries/s, lost (must be 0),
latency from POST to receipt, server CPU summed over the nodes, and the ratio two nodes /
one node. Both nodes share this machine's 2 cores with the clients: the ratio says what a
second node costs or gains here, not on two machines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
from _load import (
    create_pg_database,
    drop_pg_database,
    free_port,
    make_user,
    raise_nofile,
    say_changed_defaults,
    wait_http,
)
from fanout import Ridecast, report, ridecast_publisher, run_scenario

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"


def start_node(tmp: Path, database_url: str, prefix: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "RIDECAST_DATABASE_URL": database_url, "RIDECAST_BUS_URL": REDIS_URL,
           "RIDECAST_BUS_PREFIX": prefix, "RIDECAST_LOG_LEVEL": "warning",
           "RIDECAST_WS_SEND_QUEUE": "100000",
           "RIDECAST_WS_MAX_STREAMS_PER_TOKEN": "100000",
           "RIDECAST_WS_MAX_STREAMS_PER_USER": "100000"}
    say_changed_defaults("ridecast runs with", env)
    proc = subprocess.Popen([sys.executable, "-m", "ridecast.cli.main", "serve", "--port",
                             str(port)], env=env, cwd=tmp, preexec_fn=raise_nofile)
    try:
        wait_http(port, "/healthz")
    except RuntimeError:
        proc.kill()
        raise
    return proc, port


def main(subscribers: int, events: int) -> None:
    raise_nofile()
    name = f"ridecast_bench_{uuid.uuid4().hex[:8]}"
    database_url = create_pg_database(PG_ADMIN, name)
    if database_url is None:
        raise SystemExit("bench/fanout_cluster.py needs PostgreSQL on 127.0.0.1:5432")
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "a").mkdir()
            (Path(tmp) / "b").mkdir()
            a, port_a = start_node(Path(tmp) / "a", database_url, prefix)
            nodes.append(a)
            b, port_b = start_node(Path(tmp) / "b", database_url, prefix)
            nodes.append(b)
            key = asyncio.run(make_user(database_url))
            with httpx.Client(base_url=f"http://127.0.0.1:{port_a}", auth=("bench", key)) as c:
                sim = int(c.post("/api/v2/simulation", json={"name": "b", "data": {}}).json()["id"])
                token = c.get("/api/v2/user/token/").json()["token"]
            rc = Ridecast(a, port_a, 0, ("bench", key), sim, token)
            path = f"/simulation_events/{sim}?token={token}"
            url_a, url_b = f"ws://127.0.0.1:{port_a}{path}", f"ws://127.0.0.1:{port_b}{path}"
            print(f"cluster on PostgreSQL + Redis, {subscribers} subscribers, {events} events "
                  "(batches of 50, back to back):", flush=True)
            one = asyncio.run(run_scenario(
                "one node", [url_a], subscribers, events, [a.pid],
                ridecast_publisher(rc, events, batch=50, rate=None)))
            report(one)
            two = asyncio.run(run_scenario(
                "two nodes", [url_a, url_b], subscribers, events, [a.pid, b.pid],
                ridecast_publisher(rc, events, batch=50, rate=None)))
            report(two)
            print(f"ratio two nodes / one node: {two.rate / max(one.rate, 1e-9):.2f}x "
                  f"(deliveries/s); lost: {one.lost} and {two.lost}")
    finally:
        for proc in nodes:
            proc.terminate()
            proc.wait(15)
        drop_pg_database(PG_ADMIN, name)
        import redis

        redis.Redis.from_url(REDIS_URL).delete(f"{prefix}:bus")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--events", type=int, default=300)
    args = parser.parse_args()
    main(args.subscribers, args.events)
