"""Our documents with code generators' defaults, as an integrator runs them (issue 53).

The documents are fetched from a running server; the generators come from npm (pinned in
tools/generators/package-lock.json; the test is skipped only where npm is absent) and PyPI:

- Modelina (TypeScript, defaults) on /asyncapi.json: a model per event and part, which
  ``tsc --strict`` accepts;
- openapi-typescript (defaults) on /openapi.json: the README's own ingest event, typed as
  ``EventIn``, passes ``tsc --strict`` (no optional field is made required);
- datamodel-codegen with docs/client.md's command on /openapi.json prints no warning;
- datamodel-codegen on /schema.json (``ridecast schema``): a model per event type, with which a
  small program passes ``mypy --strict`` and reads a real event.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ridecast.events import MessageType
from tests.conftest import Server, launch_server

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "generators"
TIMEOUT_S = 600


def _node_tools() -> Path:
    """tools/generators with its node_modules installed from the lock file."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are not installed")
    installed = TOOL / "node_modules" / ".package-lock.json"
    lock = TOOL / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        done = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=TOOL, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr
    return TOOL / "node_modules" / ".bin"


def _python_tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    assert found is not None, f"{name} is not installed (pip install '.[dev]')"
    return found


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """/asyncapi.json, /openapi.json and /schema.json as a running server serves them."""
    srv: Server = launch_server(tmp_path_factory.mktemp("generators"))
    try:
        yield {path: httpx.get(f"{srv.base_url}/{path}", timeout=30).json()
               for path in ("asyncapi.json", "openapi.json", "schema.json")}
    finally:
        srv.stop()


def _tsc(bin_dir: Path, cwd: Path, *files: str) -> None:
    done = subprocess.run([str(bin_dir / "tsc"), "--strict", "--noEmit", "--target", "es2022",
                           "--module", "nodenext", *files], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_modelina_reads_the_asyncapi_document(documents: dict[str, Any],
                                              tmp_path: Path) -> None:
    """Modelina with its defaults: every event a model (not ``type Root = any``), and the
    models pass ``tsc --strict``."""
    bin_dir = _node_tools()
    (tmp_path / "asyncapi.json").write_text(json.dumps(documents["asyncapi.json"]))
    done = subprocess.run(["node", str(TOOL / "modelina.mjs"), "asyncapi.json", "models.ts"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, done.stderr
    names = set(json.loads(done.stdout)["models"])
    events = {f"{''.join(w.title() for w in t.value.split('_'))}Event" for t in MessageType}
    assert events <= names, sorted(events - names)
    assert "= any;" not in (tmp_path / "models.ts").read_text()
    _tsc(bin_dir, tmp_path, "models.ts")


def test_openapi_typescript_types_the_readmes_event(documents: dict[str, Any],
                                                    tmp_path: Path) -> None:
    """openapi-typescript with its defaults; the README's ingest event, as the README writes
    it (no agent_id, simulation_id or server_ts), is an ``EventIn`` for ``tsc --strict``."""
    bin_dir = _node_tools()
    (tmp_path / "openapi.json").write_text(json.dumps(documents["openapi.json"]))
    done = subprocess.run([str(bin_dir / "openapi-typescript"), "openapi.json", "-o",
                           "api.d.ts"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    readme = (ROOT / "README.md").read_text()
    body = re.search(r"/events (?:-H '[^']*' )?-d '(\{.*?\})'", readme, re.S)
    assert body is not None, "the README's ingest example moved"
    event = json.loads(body.group(1))
    assert "agent_id" not in event
    (tmp_path / "event.ts").write_text(
        'import type { components } from "./api";\n'
        'type EventIn = components["schemas"]["EventIn"];\n'
        f"const event: EventIn = {json.dumps(event)};\n"
        "console.log(event);\n")
    _tsc(bin_dir, tmp_path, "event.ts")


def test_the_documented_datamodel_codegen_command_prints_no_warning(
    documents: dict[str, Any], tmp_path: Path,
) -> None:
    """docs/client.md's command, word for word, on /openapi.json: no warning at all."""
    (tmp_path / "openapi.json").write_text(json.dumps(documents["openapi.json"]))
    docs = (ROOT / "docs" / "client.md").read_text()
    command = re.search(r"(datamodel-codegen --input openapi.json.*?--output models.py)", docs,
                        re.S)
    assert command is not None, "docs/client.md's datamodel-codegen command moved"
    args = command.group(1).replace("\\\n", " ").split()[1:]
    done = subprocess.run([_python_tool("datamodel-codegen"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    assert (tmp_path / "models.py").exists()


PROGRAM = '''\
"""Reads one event with models generated from `ridecast schema`."""

from __future__ import annotations

import json
import sys

from events import VehicleUseEvent

event = VehicleUseEvent.model_validate(json.loads(sys.argv[1]))
vehicle: int = event.data.vehicle_id
print(vehicle, event.message_type)
'''


def test_ridecast_schema_is_one_document_that_datamodel_codegen_models(
    documents: dict[str, Any], tmp_path: Path,
) -> None:
    """`ridecast schema` (the CLI process) prints the document /schema.json serves: $defs
    and a oneOf of the 18; datamodel-codegen makes a model per type, not RootModel[Any], and
    a program using one passes mypy --strict and reads a real event."""
    printed = subprocess.run([sys.executable, "-m", "ridecast.cli.main", "schema"],
                             capture_output=True, text=True, timeout=120, check=True)
    schema = json.loads(printed.stdout)
    assert schema == documents["schema.json"]
    assert len(schema["oneOf"]) == len(MessageType)
    assert all(ref["$ref"].removeprefix("#/$defs/") in schema["$defs"]
               for ref in schema["oneOf"])
    (tmp_path / "schema.json").write_text(printed.stdout)
    done = subprocess.run(
        [_python_tool("datamodel-codegen"), "--input", "schema.json", "--input-file-type",
         "jsonschema", "--output-model-type", "pydantic_v2.BaseModel", "--formatters",
         "builtin", "--field-constraints", "--output", "events.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr
    assert "RootModel[Any]" not in (tmp_path / "events.py").read_text()
    (tmp_path / "program.py").write_text(PROGRAM)
    checked = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                              "program.py"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=TIMEOUT_S, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    from ridecast.events.examples import example_event

    ran = subprocess.run([sys.executable, "program.py",
                          json.dumps(example_event("vehicle_use", 1))],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split()[1] == "vehicle_use"
