"""listen: argument parsing and summary lines (pure), and the real command across a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ridecast.cli.listen import COLOURS, event_line, parse_target, summarise
from ridecast.events import ALL_TYPES
from ridecast.events.examples import all_examples
from tests.conftest import Server, free_port


@pytest.mark.parametrize(
    ("args", "sim", "types"),
    [([], None, []), (["3"], 3, []), (["gps_data"], None, ["gps_data"]),
     (["3", "gps_data"], 3, ["gps_data"]), (["gps_data", "3"], 3, ["gps_data"]),
     (["assignment,bookings"], None, ["assignment", "bookings"])],
)
def test_parse_target(args: list[str], sim: int | None, types: list[str]) -> None:
    """SIM and TYPE come in either order, as the websocket paths allow."""
    assert parse_target(args) == (sim, types)


@pytest.mark.parametrize("args", [["1", "2"], ["teleport"], ["3", "gps_data,nope"]])
def test_parse_target_refuses(args: list[str]) -> None:
    """Two ids or an unknown type are refused with a message."""
    with pytest.raises(ValueError):
        parse_target(args)


def test_every_type_has_a_colour_and_a_summary() -> None:
    """Each of the 18 types gets its own colour and a specific summary of its example."""
    assert set(COLOURS) == ALL_TYPES
    for event in all_examples(1):
        line = summarise(event)
        assert line and not line.startswith("{"), event["message_type"]
        assert event["message_type"] in event_line({**event, "event_id": "5"})


@given(st.sampled_from(sorted(ALL_TYPES)), st.dictionaries(
    st.sampled_from(["vehicle_id", "bookings", "booking_ids", "nodes", "offers", "lat", "x"]),
    st.none() | st.integers() | st.text(max_size=3) | st.lists(st.integers(), max_size=7)
    | st.lists(st.dictionaries(st.text(max_size=2), st.integers(), max_size=2), max_size=2)))
def test_summary_never_raises(message_type: str, data: dict[str, Any]) -> None:
    """Whatever a payload holds, the summary line is a string (a feed must not crash)."""
    assert isinstance(summarise({"message_type": message_type, "data": data}), str)


def test_listen_command_resumes_across_a_server_restart(
    start_server: Callable[..., Server],
) -> None:
    """`ridecast listen --json --count 4` survives a server restart and misses nothing."""
    first = start_server()
    user = first.create_user()
    sim = first.create_simulation(user)
    env = {**os.environ, "RIDECAST_URL": first.base_url, "RIDECAST_USER": user.name,
           "RIDECAST_API_KEY": user.key}
    with first.client(user) as http:
        before = http.post(f"/api/v2/simulation/{sim}/events",
                           json=[all_examples(sim)[0]] * 2).json()["event_ids"]
    listen = subprocess.Popen(
        [sys.executable, "-m", "ridecast.cli.main", "listen", str(sim), "--since", "0",
         "--json", "--count", "4"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert listen.stdout is not None
        lines = [listen.stdout.readline(), listen.stdout.readline()]
        first.stop(signal.SIGTERM)
        second = start_server(database_url=first.database_url, port=first.port)
        with second.client(user) as http:
            after = http.post(f"/api/v2/simulation/{sim}/events",
                              json=[all_examples(sim)[1]] * 2).json()["event_ids"]
        out, err = listen.communicate(timeout=30)
    finally:
        listen.kill()
        listen.wait()
    lines += out.splitlines()
    assert listen.returncode == 0, err
    assert [json.loads(line)["event_id"] for line in lines if line.strip()] == before + after
    assert "reconnecting" in err


def test_listen_takes_several_urls_and_uses_the_one_that_answers(server: Server) -> None:
    """RIDECAST_URL naming a node that is down, then one that is up: listen gets its token
    and its stream from the second, and prints the events."""
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        ids = http.post(f"/api/v2/simulation/{sim}/events",
                        json=[all_examples(sim)[0]] * 2).json()["event_ids"]
    down = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "RIDECAST_URL": f"{down},{server.base_url}",
           "RIDECAST_USER": user.name, "RIDECAST_API_KEY": user.key}
    done = subprocess.run(
        [sys.executable, "-m", "ridecast.cli.main", "listen", str(sim), "--since", "0",
         "--json", "--count", "2"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["event_id"] for line in done.stdout.splitlines()] == ids
