"""/asyncapi.json parsed by the official parser, and checked against the models (issue 35 item 2).

The parser is @asyncapi/parser from npm, pinned in tools/asyncapi/package-lock.json and
installed here with ``npm ci`` (no install scripts, no browser) when its node_modules are
missing or older than the lock. It reads the document a running server serves; any error,
and any warning not in ``KEPT_WARNINGS`` with its reason, fails the test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ridecast.events import EVENT_MODELS, MessageType
from ridecast.events.schema import without_null_defaults
from tests.conftest import Server, launch_server

TOOL = Path(__file__).resolve().parents[2] / "tools" / "asyncapi"
TIMEOUT_S = 300

# Warnings of the parser's ruleset that we decided to keep, by code, each with its reason.
# None today: a new one fails the test until it is fixed or listed here.
KEPT_WARNINGS: dict[str, str] = {}

ERROR, WARNING = 0, 1

SHAPES = {
    "/simulation_events", "/simulation_events/{simulation_id}", "/simulation_events/{type}",
    "/simulation_events/{simulation_id}/{type}", "/simulation_events/{type}/{simulation_id}",
}


def _parser() -> Path:
    """tools/asyncapi with its node_modules installed from the lock file."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node 20 and npm are needed to parse the AsyncAPI document"
    installed = TOOL / "node_modules" / ".package-lock.json"
    lock = TOOL / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        done = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=TOOL, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )
        assert done.returncode == 0, done.stderr
    return TOOL / "check.mjs"


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The document a real server serves at /asyncapi.json."""
    srv: Server = launch_server(tmp_path_factory.mktemp("asyncapi"))
    try:
        response = httpx.get(f"{srv.base_url}/asyncapi.json", timeout=30)
        assert response.status_code == 200
        yield response.json()
    finally:
        srv.stop()


def test_the_official_parser_finds_no_error_and_no_unlisted_warning(
    document: dict[str, Any], tmp_path: Path,
) -> None:
    """@asyncapi/parser accepts the served document; only kept warnings may remain."""
    check = _parser()
    source = tmp_path / "asyncapi.json"
    source.write_text(json.dumps(document))
    done = subprocess.run(["node", str(check), str(source)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    diagnostics = result["diagnostics"]
    errors = [d for d in diagnostics if d["severity"] == ERROR]
    unlisted = [d for d in diagnostics
                if d["severity"] == WARNING and d["code"] not in KEPT_WARNINGS]
    assert result["parsed"], errors
    assert not errors, errors
    assert not unlisted, unlisted


def test_current_version_with_five_shapes_servers_and_security(
    document: dict[str, Any],
) -> None:
    """AsyncAPI 3, the interface's five path shapes, the webhook, servers and the token
    in query or header on every stream."""
    assert document["asyncapi"].startswith("3.")
    channels = document["channels"]
    addresses = {c["address"] for c in channels.values() if c["address"] is not None}
    assert addresses == SHAPES
    assert channels["messaging_webhook_url"]["address"] is None
    schemes = document["components"]["securitySchemes"]
    assert {(s["in"], s["name"]) for s in schemes.values()} == {
        ("query", "token"), ("header", "Authorization")}
    servers = document["servers"]
    assert {s["protocol"] for s in servers.values()} >= {"ws", "wss"}
    for server in servers.values():
        if server["protocol"] in ("ws", "wss"):
            assert len(server["security"]) == 2
    assert channels["typeSimulationEvents"]["parameters"]["type"]["enum"] == [
        t.value for t in MessageType]


def test_eighteen_messages_and_an_operation_per_channel(document: dict[str, Any]) -> None:
    """Each message is keyed by its type (its id in AsyncAPI 3) and every channel has one
    operation, keyed by its id, that sends all 18."""
    messages = document["components"]["messages"]
    assert list(messages) == [t.value for t in MessageType]
    operations = document["operations"]
    assert len(operations) == len(document["channels"]) == 6
    for operation in operations.values():
        assert operation["action"] == "send"
        assert len(operation["messages"]) == 18
    assert sorted(operations) == sorted({
        "streamAllEvents", "streamSimulationEvents", "streamTypeEvents",
        "streamSimulationTypeEvents", "streamTypeSimulationEvents", "deliverWebhook"})


def test_payloads_are_the_models_schemas(document: dict[str, Any]) -> None:
    """Every payload is its pydantic model's JSON Schema, not a copy written by hand."""
    schemas = document["components"]["schemas"]
    for message_type, model in EVENT_MODELS.items():
        message = document["components"]["messages"][message_type.value]
        assert message["payload"] == {"$ref": f"#/components/schemas/{model.__name__}"}
        # As generators read them by default: no "default": null (events/schema.py).
        expected = without_null_defaults(
            model.model_json_schema(ref_template="#/components/schemas/{model}"))
        for name, definition in expected.pop("$defs", {}).items():
            assert schemas[name] == definition, name
        assert schemas[model.__name__] == expected, model.__name__
