"""The rest of the CLI as a user meets it: simulator control, publishing events, the signing
and forwarding receiver, "did you mean", --json on every read command. Each runs as a real
``ridecast`` process against a real server; every error is one line on stderr."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ridecast.cli.receiver import ReceiverThread, Reply, Request
from ridecast.cli.suggest import option_suggestion
from ridecast.events.examples import example_event
from ridecast.events.signing import sign_headers
from tests.cli.test_first_run import assert_one_line_error, plain_env
from tests.conftest import Server, User, free_port
from tests.waiting import eventually

TIMEOUT_S = 60
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SMALL_SIM = {"simulator": {"seed": 3, "vehicles": 3, "bookings_per_hour": 60}}


def ridecast(server_url: str, user: User | None, *args: str, stdin: str | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**plain_env(), "RIDECAST_URL": server_url, "NO_COLOR": "1", "COLUMNS": "200"}
    if user is not None:
        env.update(RIDECAST_USER=user.name, RIDECAST_API_KEY=user.key)
    return subprocess.run([sys.executable, "-m", "ridecast.cli.main", *args], env=env,
                          input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=cwd)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def user(server: Server) -> User:
    return server.create_user()


# --- simulations status|start|pause|resume|stop|delete -------------------------------------


def test_simulator_lifecycle_from_the_cli(server: Server, user: User) -> None:
    sim = str(server.create_simulation(user, SMALL_SIM))
    url = server.base_url
    assert json.loads(ok(ridecast(url, user, "simulations", "status", sim, "--json"))
                      )["status"] == "idle"
    assert "running" in ok(ridecast(url, user, "simulations", "start", sim))
    status = json.loads(ok(ridecast(url, user, "simulations", "status", sim, "--json")))
    assert status["status"] == "running" and "bookings" in status["kpis"]
    table = ok(ridecast(url, user, "simulations", "status", sim))
    assert f"simulation {sim}: simulator running" in table
    assert "occupancy (passenger-km per vehicle-km)" in table
    assert json.loads(ok(ridecast(url, user, "simulations", "pause", sim, "--json"))
                      )["status"] == "paused"
    assert "running" in ok(ridecast(url, user, "simulations", "resume", sim))
    assert "stopped" in ok(ridecast(url, user, "simulations", "stop", sim))
    assert f"simulation {sim} deleted" in ok(ridecast(url, user, "simulations", "delete", sim))
    for command in ("status", "start", "pause", "resume", "stop", "delete", "show"):
        done = ridecast(url, user, "simulations", command, sim)
        assert_one_line_error(done, f"simulation {sim}", "not found")


def test_client_commands_name_the_address_when_no_server_answers() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    for args in (("simulations", "status", "1"), ("simulations", "list"), ("token",),
                 ("events", "history", "1")):
        done = ridecast(url, None, *args)
        assert_one_line_error(done, url, "--url")


# --- events post|history ---------------------------------------------------------------------


def test_events_post_from_a_file_and_from_stdin_prints_the_ids(
        server: Server, user: User, tmp_path: Path) -> None:
    sim = server.create_simulation(user)
    batch = [example_event("vehicle_use", sim), example_event("gps_data", sim)]
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(batch))
    ids = ok(ridecast(server.base_url, user, "events", "post", str(sim), str(path))).split()
    assert len(ids) == 2
    one = ok(ridecast(server.base_url, user, "events", "post", str(sim), "-", "--json",
                      stdin=json.dumps(example_event("vehicle_use", sim))))
    assert json.loads(one)["count"] == 1
    history = json.loads(ok(ridecast(server.base_url, user, "events", "history", str(sim),
                                     "--json")))
    assert [e["event_id"] for e in history] == [*ids, json.loads(one)["event_ids"][0]]
    gps = json.loads(ok(ridecast(server.base_url, user, "events", "history", str(sim),
                                 "--type", "gps_data", "--json")))
    assert [e["message_type"] for e in gps] == ["gps_data"]
    lines = ok(ridecast(server.base_url, user, "events", "history", str(sim))).splitlines()
    assert len(lines) == 3 and "vehicle_use" in lines[0]


def test_a_refused_batch_names_the_index_and_field_and_stores_nothing(
        server: Server, user: User) -> None:
    sim = server.create_simulation(user)
    good = example_event("vehicle_use", sim)
    typo = {**example_event("vehicle_use", sim), "message_type": "vehicle_us"}
    missing = example_event("gps_data", sim)
    del missing["data"]["lat"]
    done = ridecast(server.base_url, user, "events", "post", str(sim), "-",
                    stdin=json.dumps([good, typo, missing]))
    assert_one_line_error(done, "event 1", "field message_type", "did you mean 'vehicle_use'",
                          "event 2", "field data.lat", "nothing was stored")
    history = ok(ridecast(server.base_url, user, "events", "history", str(sim), "--json"))
    assert json.loads(history) == []


def test_events_post_input_errors_are_one_line(
        server: Server, user: User, tmp_path: Path) -> None:
    sim = str(server.create_simulation(user))
    broken = tmp_path / "broken.json"
    broken.write_text('{"agent_type": ')
    cases = [
        ((str(tmp_path / "missing.json"),), None, "missing.json"),
        ((str(broken),), None, "broken.json"),
        (("-",), "[1, 2]", "event 0"),
        (("-",), "[]", "empty"),
        (("-",), '"text"', "stdin"),
    ]
    for args, stdin, named in cases:
        done = ridecast(server.base_url, user, "events", "post", sim, *args, stdin=stdin)
        assert_one_line_error(done, named)
    done = ridecast(server.base_url, user, "events", "post", "999999", "-",
                    stdin=json.dumps(example_event("vehicle_use", 999999)))
    assert_one_line_error(done, "simulation 999999")


# --- did you mean --------------------------------------------------------------------------


def test_a_mistyped_command_gets_one_line_with_a_suggestion(tmp_path: Path) -> None:
    done = ridecast("http://127.0.0.1:1", None, "lsten", cwd=tmp_path)
    assert_one_line_error(done, "'lsten'", "Did you mean 'listen'")
    done = ridecast("http://127.0.0.1:1", None, "simulations", "stats", "1", cwd=tmp_path)
    assert_one_line_error(done, "'stats'", "'status'")
    done = ridecast("http://127.0.0.1:1", None, "simulations", "status", cwd=tmp_path)
    assert_one_line_error(done, "Missing argument")
    assert done.returncode == 2


def test_a_mistyped_option_gets_the_close_one_or_no_suggestion(tmp_path: Path) -> None:
    done = ridecast("http://127.0.0.1:1", None, "serve", "--prot", "8000", cwd=tmp_path)
    assert_one_line_error(done, "No such option: --prot", "Did you mean '--port'?")
    assert done.returncode == 2
    done = ridecast("http://127.0.0.1:1", None, "listen", "1", "--usr", "x", cwd=tmp_path)
    assert_one_line_error(done, "--usr", "Did you mean '--user'?")
    assert "--url" not in done.stderr and "--server" not in done.stderr
    # Nothing is close to --bogus: no suggestion (Click's own offered --user).
    done = ridecast("http://127.0.0.1:1", None, "listen", "--bogus", cwd=tmp_path)
    assert_one_line_error(done, "No such option: --bogus", "listen --help")
    assert "mean" not in done.stderr and "Possible" not in done.stderr
    assert done.returncode == 2


def test_option_suggestion_compares_the_names_without_their_dashes() -> None:
    options = ["--host", "--port", "--data-dir", "--help", "-h"]
    assert option_suggestion("--prot", options) == ". Did you mean '--port'?"
    assert option_suggestion("--data-dr=x", options) == ". Did you mean '--data-dir'?"
    assert option_suggestion("--bogus", ["--user", "--url", "--server", "--help"]) == ""
    assert option_suggestion("--zz", []) == ""


def test_a_mistyped_event_type_gets_a_suggestion(server: Server, user: User) -> None:
    sim = str(server.create_simulation(user))
    for args in (("listen", sim, "gps_dat"), ("events", "history", sim, "--type", "gps_dat"),
                 ("webhook", "set", sim, "--url", "http://127.0.0.1:9/h", "--types",
                  "assignment,gps_dat"),
                 ("webhook", "deliveries", sim, "--type", "gps_dat")):
        done = ridecast(server.base_url, user, *args)
        assert_one_line_error(done, "'gps_dat'", "did you mean 'gps_data'")


# --- --json on every read command ----------------------------------------------------------


def test_every_read_command_has_json(server: Server, user: User, tmp_path: Path) -> None:
    sim = str(server.create_simulation(user))
    for args in (("simulations", "list"), ("simulations", "show", sim),
                 ("simulations", "status", sim), ("events", "history", sim), ("token",),
                 ("webhook", "show", sim), ("webhook", "deliveries", sim)):
        json.loads(ok(ridecast(server.base_url, user, *args, "--json")))
    ok(ridecast(server.base_url, None, "users", "create", "ada", "--org", "acme", cwd=tmp_path))
    for args in (("users", "list"), ("users", "keys", "ada"), ("config", "show")):
        done = ridecast(server.base_url, None, *args, "--json", cwd=tmp_path)
        json.loads(ok(done))


# --- receiver --secret / --forward ---------------------------------------------------------


class ReceiverProcess:
    """``ridecast receiver`` as a subprocess on a free port; its stdout goes to a file."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.port = free_port()
        self.log = tmp / f"receiver-{self.port}.out"
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ridecast.cli.main", "receiver", "--port",
                 str(self.port), "--json", *args],
                stdout=out, stderr=subprocess.PIPE, text=True, env=plain_env())
        assert self.process.stderr is not None
        assert "listening on" in self.process.stderr.readline()
        self.url = f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()
                if line.startswith("{")]

    def wait_for(self, count: int) -> list[dict[str, object]]:
        """The logged requests once there are at least ``count``."""
        return eventually(lambda: len(r := self.requests()) >= count and r,
                          timeout=10, what=f"{count} requests logged", why=self.requests)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        assert self.process.stderr is not None
        self.process.stderr.close()


@pytest.fixture
def receivers(tmp_path: Path) -> Iterator[list[ReceiverProcess]]:
    started: list[ReceiverProcess] = []
    yield started
    for receiver in started:
        receiver.stop()


def test_receiver_verifies_signatures(tmp_path: Path, receivers: list[ReceiverProcess]) -> None:
    receivers.append(receiver := ReceiverProcess(tmp_path, "--secret", SECRET))
    body = b'{"message_type":"assignment"}'
    signed = sign_headers(SECRET, "msg_1", int(time.time()), body)
    assert httpx.post(receiver.url + "/hook", content=body, headers=signed).status_code == 204
    forged = sign_headers("whsec_" + "A" * 32, "msg_2", int(time.time()), body)
    assert httpx.post(receiver.url + "/hook", content=body, headers=forged).status_code == 401
    assert httpx.post(receiver.url + "/hook", content=body).status_code == 401
    logged = receiver.wait_for(3)
    assert logged[0]["signature"] == "valid"
    assert str(logged[1]["signature"]).startswith("invalid: no webhook-signature matches")
    assert str(logged[2]["signature"]).startswith("invalid: missing")


def test_receiver_checks_what_ridecast_really_signs(
        server: Server, user: User, tmp_path: Path, receivers: list[ReceiverProcess]) -> None:
    """``webhook set --secret`` on the server, ``receiver --secret`` with the same secret: the
    real dispatcher's test delivery is accepted; with another secret it is refused."""
    receivers.append(right := ReceiverProcess(tmp_path, "--secret", SECRET))
    receivers.append(wrong := ReceiverProcess(tmp_path, "--secret", "whsec_" + "B" * 32))
    sim = str(server.create_simulation(user))
    for receiver, expected in ((right, 0), (wrong, 1)):
        ok(ridecast(server.base_url, user, "webhook", "set", sim, "--url", receiver.url + "/h",
                    "--types", "assignment", "--secret", SECRET))
        done = ridecast(server.base_url, user, "webhook", "test", sim, "--json")
        assert done.returncode == expected, done.stdout + done.stderr
    assert right.wait_for(1)[0]["signature"] == "valid"
    assert str(wrong.wait_for(1)[0]["signature"]).startswith("invalid")


def test_receiver_forwards_and_answers_with_the_target(
        tmp_path: Path, receivers: list[ReceiverProcess]) -> None:
    got: list[Request] = []

    def target(request: Request) -> Reply:
        got.append(request)
        return Reply(202, b"taken")

    with ReceiverThread(target) as upstream:
        receivers.append(relay := ReceiverProcess(tmp_path, "--forward", upstream.url + "/in"))
        answer = httpx.post(relay.url + "/hook", content=b'{"x":1}',
                            headers={"webhook-id": "msg_9", "content-type": "application/json"})
        assert (answer.status_code, answer.content) == (202, b"taken")
        assert got[0].target == "/in" and got[0].body == b'{"x":1}'
        assert got[0].headers["webhook-id"] == "msg_9"
        assert relay.wait_for(1)[0]["forward"] == f"forwarded to {upstream.url}/in: 202"
    receivers.append(dead := ReceiverProcess(tmp_path, "--forward",
                                             f"http://127.0.0.1:{closed_port()}/in"))
    assert httpx.post(dead.url + "/hook", content=b"{}").status_code == 502
    assert "failed" in str(dead.wait_for(1)[0]["forward"])


def test_receiver_option_errors_are_one_line(tmp_path: Path) -> None:
    for args, named in ((("--secret", "not base64!"), "--secret"),
                        (("--forward", "ftp://x"), "--forward")):
        done = subprocess.run(
            [sys.executable, "-m", "ridecast.cli.main", "receiver", "--port", str(free_port()),
             *args], capture_output=True, text=True, timeout=TIMEOUT_S, env=plain_env())
        assert_one_line_error(done, named)
