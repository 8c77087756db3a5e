"""The cluster behind nginx, configured from deploy/nginx/ridecast.conf.template (issue 53).

Two API nodes on PostgreSQL and Redis, and a real nginx started from the shipped template
(its ports filled in, as the template's header says). Through nginx a producer posts events
one at a time without pause, and a stream client follows the simulation, while the nodes are
restarted one after the other with SIGTERM, as docs/deployment.md's rolling upgrade says:
every POST is answered 201 (none refused, none failed), every accepted event is in the log
once, and the stream, reconnecting through nginx with ``since=``, sees each of them once, in
order.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from ridecast.events.examples import example_event
from tests.conftest import Server, free_port, launch_server
from tests.waiting import eventually

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "nginx" / "ridecast.conf.template"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

pytestmark = pytest.mark.skipif(not Path(NGINX).exists(),
                                reason="nginx is not installed (.ci/run installs it)")


def render(template: str, values: dict[str, str]) -> str:
    """The template with its ``${NAME}`` placeholders filled, as ``envsubst 'NAMES'`` does."""
    for name, value in values.items():
        template = template.replace("${" + name + "}", value)
    assert "${" not in template, "a placeholder is left"
    return template


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Callable[[list[Server]], str]]:
    """``start(nodes)``: nginx in front of ``nodes``; its base URL."""
    started: list[subprocess.Popen[bytes]] = []

    def start(nodes: list[Server]) -> str:
        port = free_port()
        prefix = tmp_path / "nginx"
        prefix.mkdir()
        (prefix / "ridecast.conf").write_text(render(TEMPLATE.read_text(), {
            "RIDECAST_LB_LISTEN": f"127.0.0.1:{port}",
            "RIDECAST_NODE_A": f"127.0.0.1:{nodes[0].port}",
            "RIDECAST_NODE_B": f"127.0.0.1:{nodes[1].port}"}))
        temp = "".join(f"{kind}_temp_path {prefix}/{kind};\n"
                       for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (prefix / "nginx.conf").write_text(
            f"worker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\n"
            "events { worker_connections 1024; }\n"
            f"http {{\naccess_log off;\n{temp}include {prefix}/ridecast.conf;\n}}\n")
        process = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
                                    "-g", "daemon off;"])
        started.append(process)
        base = f"http://127.0.0.1:{port}"

        def passes_readyz() -> bool:
            assert process.poll() is None, (prefix / "error.log").read_text()
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200

        eventually(passes_readyz, timeout=30, step=0.1, ignoring=(httpx.HTTPError,),
                   what="nginx passing /readyz on")
        return base

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=15)


def written(node: Server) -> float:
    """Events this node's process has written to the log (its /metrics)."""
    for line in httpx.get(f"{node.base_url}/metrics", timeout=10).text.splitlines():
        if line.startswith("ridecast_eventlog_events_total "):
            return float(line.split()[1])
    return 0.0


def wait_until_it_takes_requests(node: Server) -> None:
    eventually(lambda: written(node) >= 5, timeout=60, step=0.1,
               what="nginx taking the node back")


def test_a_rolling_restart_behind_nginx_loses_and_fails_nothing(
    cluster: Callable[..., Server], nginx: Callable[[list[Server]], str], pg_url: str,
    tmp_path: Path,
) -> None:
    """Each node restarted in turn (SIGTERM, same address, wait for /readyz) under steady
    ingest and a live stream, all through nginx."""
    nodes = [cluster(), cluster()]
    base = nginx(nodes)
    user = nodes[0].create_user()
    sim = nodes[0].create_simulation(user)
    token = nodes[0].token(user)
    statuses: list[int] = []
    accepted: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        with httpx.Client(base_url=base, auth=user.auth, timeout=30) as http:
            while not stop.is_set():
                answer = http.post(f"/api/v2/simulation/{sim}/events",
                                   json=example_event("vehicle_use", sim))
                statuses.append(answer.status_code)
                if answer.status_code == 201:
                    accepted.append(str(answer.json()["event_ids"][0]))

    streamed: list[str] = []

    produced = threading.Event()  # the producer has ended: ``accepted`` is final
    abandoned = threading.Event()  # the test ends early: the follower stops too

    def followed_all() -> bool:
        return abandoned.is_set() or (produced.is_set() and len(streamed) >= len(accepted))

    async def follow() -> None:
        """A stream client through nginx: on a close it reconnects with since=; it ends
        once it has every event the producer had accepted when it ended (``stop`` alone
        is not enough: a request in flight then may still add one)."""
        ws_base = base.replace("http://", "ws://")
        while not followed_all():
            since = f"&since={streamed[-1]}" if streamed else "&since=0"
            try:
                async with websockets.connect(
                        f"{ws_base}/simulation_events/{sim}?token={token}{since}") as ws:
                    while not followed_all():
                        try:
                            frame = await asyncio.wait_for(ws.recv(), 0.5)
                        except TimeoutError:
                            continue  # look at followed_all() again
                        streamed.append(str(json.loads(frame)["event_id"]))
            except (OSError, websockets.exceptions.WebSocketException):
                await asyncio.sleep(0.2)

    producer = threading.Thread(target=produce)
    follower = threading.Thread(target=lambda: asyncio.run(follow()))
    producer.start()
    follower.start()
    try:
        def wait_for_more(count: int) -> None:
            target = len(accepted) + count

            def more() -> bool:
                assert producer.is_alive(), statuses[-5:]
                return len(accepted) >= target

            eventually(more, timeout=60, what=f"{count} more accepted",
                       why=lambda: statuses[-5:])

        wait_for_more(20)
        for index, node in enumerate(nodes):
            node.stop()  # SIGTERM: docs/deployment.md, rolling upgrade, step 1
            wait_for_more(20)  # the other node takes every request meanwhile
            folder = tmp_path / f"restarted{index}"
            folder.mkdir()
            nodes[index] = launch_server(folder, node.env, database_url=pg_url,
                                         port=node.port)  # step 2: waits for it to answer
            assert httpx.get(f"{nodes[index].base_url}/readyz").status_code == 200
            # Step 3: nginx takes it back into rotation once its fail_timeout has passed;
            # the next node is stopped only once this one writes events again.
            wait_until_it_takes_requests(nodes[index])
            wait_for_more(20)
        stop.set()
        producer.join(timeout=60)
        produced.set()
        follower.join(timeout=60)
        assert not follower.is_alive(), (len(streamed), len(accepted))
        assert set(statuses) == {201}, {c: statuses.count(c) for c in set(statuses)}
        logged: list[str] = []
        with httpx.Client(base_url=base, auth=user.auth, timeout=30) as http:
            while True:
                page = http.get(f"/api/v2/simulation/{sim}/events",
                                params={"after": logged[-1] if logged else "0", "limit": 1000})
                assert page.status_code == 200, page.text
                ids = [str(e["event_id"]) for e in page.json()["objects"]]
                if not ids:
                    break
                logged.extend(ids)
        assert logged == accepted
        assert streamed == accepted
    finally:
        stop.set()
        abandoned.set()
        for node in nodes:
            node.stop()
