"""token, simulations, webhook and listen commands against a real server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from typer.testing import CliRunner

from ridecast.cli.main import app
from ridecast.events.examples import example_event
from tests.conftest import Server, User, free_port


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def env_for(server: Server, user: User) -> dict[str, str]:
    return {"RIDECAST_URL": server.base_url, "RIDECAST_USER": user.name,
            "RIDECAST_API_KEY": user.key, "NO_COLOR": "1", "COLUMNS": "200"}


class Receiver:
    """A real HTTP receiver on loopback that answers 204 and counts requests."""

    def __init__(self, port: int) -> None:
        received = self.received = []  # type: list[bytes]

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                received.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.http = HTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def receiver() -> Iterator[Callable[[int], Receiver]]:
    started: list[Receiver] = []

    def start(port: int) -> Receiver:
        started.append(Receiver(port))
        return started[-1]

    yield start
    for r in started:
        r.close()


def test_token(server: Server, runner: CliRunner) -> None:
    """`ridecast token` prints a token; --json prints {"token": ...}."""
    env = env_for(server, server.create_user())
    plain = runner.invoke(app, ["token"], env=env)
    assert plain.exit_code == 0, plain.output
    assert len(plain.stdout.strip()) == 36
    as_json = runner.invoke(app, ["token", "--json"], env=env)
    assert len(json.loads(as_json.stdout)["token"]) == 36


def test_bad_credentials_exit_2_with_one_line(server: Server, runner: CliRunner) -> None:
    """Wrong credentials give exit status 2 and a readable message, no traceback."""
    env = {**env_for(server, server.create_user()), "RIDECAST_API_KEY": "wrong"}
    result = runner.invoke(app, ["token"], env=env)
    assert result.exit_code == 2
    assert "invalid_credentials" in result.stderr and "Traceback" not in result.output


def test_simulations_create_list_show(server: Server, runner: CliRunner) -> None:
    """create prints the id; list and show --json give the objects with the ETag."""
    env = env_for(server, server.create_user())
    created = runner.invoke(app, ["simulations", "create", "cli", "--data", '{"a": 1}'], env=env)
    assert created.exit_code == 0, created.output
    sim_id = int(created.stdout)
    listed = json.loads(runner.invoke(app, ["simulations", "list", "--json"], env=env).stdout)
    assert [s["id"] for s in listed] == [sim_id]
    shown = json.loads(runner.invoke(app, ["simulations", "show", str(sim_id), "--json"],
                                     env=env).stdout)
    assert shown["data"] == {"a": 1} and shown["etag"]
    pretty = runner.invoke(app, ["simulations", "list"], env=env)
    assert "cli" in pretty.stdout
    missing = runner.invoke(app, ["simulations", "show", "999999999"], env=env)
    assert missing.exit_code == 1 and "simulation_not_found" in missing.stderr
    bad = runner.invoke(app, ["simulations", "create", "x", "--data", "[1]"], env=env)
    assert bad.exit_code == 1


def test_webhook_set_show_clear_keep_other_keys(server: Server, runner: CliRunner) -> None:
    """webhook set/clear do the read-merge-PATCH: other data keys survive."""
    user = server.create_user()
    env = env_for(server, user)
    sim = server.create_simulation(user, {"simulator": {"seed": 1}})
    result = runner.invoke(app, ["webhook", "set", str(sim), "--url", "http://127.0.0.1:9/h",
                                 "--types", "assignment,bookings", "--generate-secret", "--json"],
                           env=env)
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["message_types"] == ["assignment", "bookings"] and body["signed"]
    assert body["secret"].startswith("whsec_")
    shown = json.loads(runner.invoke(app, ["webhook", "show", str(sim), "--json"],
                                     env=env).stdout)
    assert shown["url"] == "http://127.0.0.1:9/h" and "secret" not in shown
    with server.client(user) as http:
        assert http.get(f"/api/v2/simulation/{sim}").json()["data"]["simulator"] == {"seed": 1}
    cleared = runner.invoke(app, ["webhook", "clear", str(sim)], env=env)
    assert cleared.exit_code == 0
    with server.client(user) as http:
        assert http.get(f"/api/v2/simulation/{sim}").json()["data"] == {"simulator": {"seed": 1}}
    unknown = runner.invoke(app, ["webhook", "set", str(sim), "--url", "http://127.0.0.1:9/h",
                                  "--types", "teleport"], env=env)
    assert unknown.exit_code == 1 and "teleport" in unknown.stderr


def test_webhook_test_reports_the_outcome(server: Server, runner: CliRunner,
                                          receiver: Callable[[int], Receiver]) -> None:
    """webhook test sends one request to a live receiver and exits 0; a dead one exits 1."""
    user = server.create_user()
    env = env_for(server, user)
    port = free_port()
    target = f"http://127.0.0.1:{port}/hook"
    sim = server.create_simulation(user, {"messaging_webhook_url": target,
                                          "messaging_webhook_message_types": ["bookings"]})
    dead = runner.invoke(app, ["webhook", "test", str(sim)], env=env)
    assert dead.exit_code == 1 and "failed" in dead.stdout
    live = receiver(port)
    ok = runner.invoke(app, ["webhook", "test", str(sim), "--json"], env=env)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["ok"] is True and len(live.received) == 1


def test_deliveries_and_bulk_replay(start_server: Callable[..., Server], runner: CliRunner,
                                    receiver: Callable[[int], Receiver]) -> None:
    """Failed deliveries show in the log; --retry-failed replays them all to a live receiver."""
    server = start_server({"RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[]"})
    user = server.create_user()
    env = env_for(server, user)
    port = free_port()
    sim = server.create_simulation(user, {
        "messaging_webhook_url": f"http://127.0.0.1:{port}/hook",
        "messaging_webhook_message_types": ["bookings"]})
    with server.client(user) as http:
        http.post(f"/api/v2/simulation/{sim}/events",
                  json=[example_event("bookings", sim)] * 4).raise_for_status()
    failed: list[object] = []
    for _ in range(200):
        page = json.loads(runner.invoke(app, ["webhook", "deliveries", str(sim), "--status",
                                              "failed", "--json"], env=env).stdout)
        failed = page["objects"]
        if len(failed) == 4:
            break
        threading.Event().wait(0.05)
    assert len(failed) == 4
    table = runner.invoke(app, ["webhook", "deliveries", str(sim)], env=env)
    assert "failed" in table.stdout
    live = receiver(port)
    replay = runner.invoke(app, ["webhook", "deliveries", str(sim), "--retry-failed", "--json",
                                 "--wait", "30"], env=env)
    assert replay.exit_code == 0, replay.output
    assert json.loads(replay.stdout) == {"retried": 4, "in_flight": 0, "failed": 0}
    assert len(live.received) == 4


def test_listen_json_replays_and_counts(server: Server, runner: CliRunner) -> None:
    """listen SIM TYPE --since ID --json --count N prints N raw frames of that type."""
    user = server.create_user()
    env = env_for(server, user)
    sim = server.create_simulation(user)
    types = ["bookings", "gps_data", "gps_data", "offers", "gps_data"]
    with server.client(user) as http:
        ids = http.post(f"/api/v2/simulation/{sim}/events",
                        json=[example_event(t, sim) for t in types]).json()["event_ids"]
    result = runner.invoke(app, ["listen", "gps_data", str(sim), "--since", ids[0], "--count",
                                 "3", "--json"], env=env)
    assert result.exit_code == 0, result.output
    frames = [json.loads(line) for line in result.stdout.splitlines()]
    assert [f["event_id"] for f in frames] == [ids[1], ids[2], ids[4]]
    assert {f["message_type"] for f in frames} == {"gps_data"}
    assert "connected /simulation_events/" in result.stderr


def test_listen_pretty_lines(server: Server, runner: CliRunner) -> None:
    """Without --json, each event is one summary line with its id and type."""
    user = server.create_user()
    env = env_for(server, user)
    sim = server.create_simulation(user)
    with server.client(user) as http:
        ids = http.post(f"/api/v2/simulation/{sim}/events",
                        json=[example_event(t, sim) for t in ("bookings", "assignment")]
                        ).json()["event_ids"]
    result = runner.invoke(app, ["listen", str(sim), "--since", "0", "-n", "2", "-q"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and result.stderr == ""
    assert f"#{ids[0]}" in lines[0] and "bookings" in lines[0] and "booking(s)" in lines[0]
    assert "assignment" in lines[1] and "node(s)" in lines[1]


def test_listen_refusals(server: Server, runner: CliRunner) -> None:
    """An unknown type or an invisible simulation ends listen with status 1 and a reason."""
    owner, stranger = server.create_user(), server.create_user()
    sim = server.create_simulation(owner)
    bad_type = runner.invoke(app, ["listen", "teleport"], env=env_for(server, stranger))
    assert bad_type.exit_code == 1 and "teleport" in bad_type.stderr
    hidden = runner.invoke(app, ["listen", str(sim), "-q"], env=env_for(server, stranger))
    assert hidden.exit_code == 1 and "simulation_not_found" in hidden.stderr
