"""Starts of one run sent at once, to a real server on each store: one starts the run, the
others are 409 ``invalid_state`` (already running, once the organisation's quota lock lets
them through; already starting, should one reach the node first), and the run is the one
that answered 200."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.conftest import Server, server_per_store
from tests.simulator.test_api import DATA

server = server_per_store("startrace")
STARTS = 4


def test_starts_sent_at_once_start_one_run(server: Server) -> None:
    user = server.create_user()
    sim_id = server.create_simulation(user, DATA)
    base = f"/api/v2/simulation/{sim_id}/simulator"

    def start(_: int) -> httpx.Response:
        with server.client(user) as http:
            return http.post(base + "/start")

    with ThreadPoolExecutor(STARTS) as pool:
        answers = list(pool.map(start, range(STARTS)))
    started = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert len(started) == 1, [(a.status_code, a.text) for a in answers]
    for answer in refused:
        assert answer.status_code == 409, answer.text
        error = answer.json()["error"]
        assert error["code"] == "invalid_state"
        assert ("already starting" in error["message"]
                or "already running" in error["message"]), error
    with server.client(user) as http:
        status = http.get(base).json()
        assert status["status"] == "running"
        assert status["settings"] == started[0].json()["settings"]
        stopped = http.post(base + "/stop")
        assert stopped.status_code == 200 and stopped.json()["status"] == "stopped"
