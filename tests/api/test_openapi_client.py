"""A typed client generated from the live /openapi.json, type-checked and run (issue 35 item 1).

As an integrator does: fetch the document from a running server, generate models with a real
generator from PyPI (datamodel-code-generator), write a client script against them, run
``mypy --strict`` on it (``assert_type`` fails when a field is typed ``Any``), then run it
against the same server, so that the models read real answers. And no operation's success
answer may go without a schema, whoever adds the operation.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, User, launch_server

TIMEOUT_S = 300

# The client script: every field it touches must be typed, or mypy --strict fails.
CLIENT = '''\
"""A ridecast client written against models generated from /openapi.json."""

from __future__ import annotations

import json
import sys
from typing import assert_type

import httpx

from models import (
    BookingCreated,
    Delivery,
    DeliveryList,
    Health,
    IngestResult,
    Readiness,
    EventPage,
    Simulation,
    SimulationList,
    SimulatorStatus,
    Template,
    TemplateList,
    TokenResponse,
    VehicleChanged,
    WebhookTestResult,
)

TRIP = {"pickup_lat": 52.52, "pickup_lon": 13.405, "dropoff_lat": 52.525, "dropoff_lon": 13.42}
SIMULATOR = {"seed": 3, "vehicles": 2, "speed": 1, "bookings_per_hour": 0,
             "duration_s": 3600, "area": {"lat": 52.52, "lon": 13.405, "radius_m": 300}}


def main(base: str, user: str, key: str, event: dict[str, object]) -> None:
    with httpx.Client(base_url=base, auth=(user, key), timeout=60) as http:
        health = Health.model_validate(http.get("/healthz").json())
        assert_type(health.version, str)
        ready = Readiness.model_validate(http.get("/readyz").json())
        assert_type(ready.store, str)
        template = Template.model_validate(
            http.post("/api/v2/simulation_template", json={"name": "typed"}).json())
        templates = TemplateList.model_validate(http.get("/api/v2/simulation_template").json())
        assert_type(templates.objects[0].id, int)
        fetched = http.get(f"/api/v2/simulation_template/{template.id}")
        renamed = Template.model_validate(http.patch(
            f"/api/v2/simulation_template/{template.id}", json={"name": "typed again"},
            headers={"If-Match": fetched.headers["ETag"]}).json())
        assert_type(renamed.name, str)
        spare = Template.model_validate(
            http.post("/api/v2/simulation_template", json={"name": "spare"}).json())
        deleted = http.delete(f"/api/v2/simulation_template/{spare.id}").status_code
        token = TokenResponse.model_validate(http.get("/api/v2/user/token/").json())
        assert_type(token.token, str)

        created = http.post("/api/v2/simulation",
                            json={"name": "typed", "data": {"simulator": SIMULATOR}})
        sim = Simulation.model_validate(created.json())
        assert_type(sim.id, int)
        assert_type(sim.template_id, int | None)

        hook = {"messaging_webhook_url": "http://127.0.0.1:9/hook",
                "messaging_webhook_message_types": ["vehicle_use"]}
        patched = Simulation.model_validate(
            http.patch(f"/api/v2/simulation/{sim.id}",
                       json={"data": {"simulator": SIMULATOR, **hook}}).json())
        assert_type(patched.version, int)

        event["simulation_id"] = sim.id
        ingested = IngestResult.model_validate(
            http.post(f"/api/v2/simulation/{sim.id}/events", json=[event, event]).json())
        assert_type(ingested.event_ids, list[str])
        assert_type(ingested.count, int)

        page = EventPage.model_validate(
            http.get(f"/api/v2/simulation/{sim.id}/events", params={"limit": 1}).json())
        assert_type(page.meta.next_after, str | None)
        assert_type(page.meta.count, int)
        first_page = [event.event_id for event in page.objects]  # any of the 18 event models
        assert_type(first_page, list[str | None])

        deliveries = DeliveryList.model_validate(
            http.get(f"/api/v2/simulation/{sim.id}/webhook_deliveries").json())
        assert_type(deliveries.meta.total_count, int)
        retried = Delivery.model_validate(http.post(
            f"/api/v2/simulation/{sim.id}/webhook_deliveries/{deliveries.objects[0].id}/retry"
        ).json())
        assert_type(retried.attempt_count, int)
        assert_type(retried.webhook_id, str)
        tested = WebhookTestResult.model_validate(
            http.post(f"/api/v2/simulation/{sim.id}/webhook_test").json())
        assert_type(tested.ok, bool)

        listed = SimulationList.model_validate(http.get("/api/v2/simulation").json())
        assert_type(listed.meta.total_count, int)
        ids = [item.id for item in listed.objects]
        assert_type(ids, list[int])

        started = SimulatorStatus.model_validate(
            http.post(f"/api/v2/simulation/{sim.id}/simulator/start").json())
        booked = BookingCreated.model_validate(
            http.post(f"/api/v2/simulation/{sim.id}/bookings", json=TRIP).json())
        assert_type(booked.booking.id, int)
        vehicle = VehicleChanged.model_validate(
            http.post(f"/api/v2/simulation/{sim.id}/vehicles/1/disable").json())
        assert_type(vehicle.vehicle.enabled, bool)
        stopped = SimulatorStatus.model_validate(
            http.post(f"/api/v2/simulation/{sim.id}/simulator/stop").json())
        assert_type(stopped.kpis.bookings, int | None)

        print(json.dumps({
            "simulation_id": sim.id, "event_ids": ingested.event_ids,
            "first_page": first_page,
            "listed": ids, "started": str(started.status.value),
            "deliveries": [d.event_id for d in deliveries.objects], "retried": retried.status,
            "template": template.id, "templates": [t.id for t in templates.objects],
            "renamed": renamed.name, "deleted": deleted,
            "webhook_test_ok": tested.ok,
            "booking": booked.booking.id, "published": [str(p.value) for p in booked.published],
            "vehicle_enabled": vehicle.vehicle.enabled, "stopped": str(stopped.status.value),
        }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
'''


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is not installed (pip install '.[dev]')")
    return found


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, User]]:
    srv = launch_server(tmp_path_factory.mktemp("openapi"), {"RIDECAST_WEBHOOK_WORKERS": "false"})
    try:
        yield srv, srv.create_user()
    finally:
        srv.stop()


def _document(srv: Server) -> dict[str, Any]:
    response = httpx.get(f"{srv.base_url}/openapi.json", timeout=30)
    response.raise_for_status()
    document: dict[str, Any] = response.json()
    return document


def _typed(schema: dict[str, Any], components: dict[str, Any]) -> bool:
    """True when ``schema`` says what the body holds: a model, or a typed scalar or array."""
    if "$ref" in schema:
        target = components[schema["$ref"].rsplit("/", 1)[1]]
        return bool(target.get("properties") or target.get("oneOf") or target.get("anyOf"))
    if schema.get("type") == "array":
        return _typed(schema.get("items", {}), components)
    return schema.get("type") in ("string", "integer", "number", "boolean")


def test_every_success_answer_has_a_schema(live: tuple[Server, User]) -> None:
    """Each 2xx answer but 204 names a model (or a typed scalar): none is `{}` or a bare
    object, so a generated client types nothing as `unknown`."""
    document = _document(live[0])
    components = document["components"]["schemas"]
    untyped, seen = [], 0
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if not status.startswith("2"):
                    continue
                seen += 1
                content = response.get("content", {})
                if status == "204":
                    assert not content, (method, path)
                    continue
                schemas = [body.get("schema", {}) for body in content.values()]
                if not schemas or not all(_typed(s, components) for s in schemas):
                    untyped.append(f"{method.upper()} {path} {status}")
    assert seen >= 30
    assert not untyped, f"success answers without a schema: {untyped}"


def test_operation_ids_are_unique_handler_names(live: tuple[Server, User]) -> None:
    """A generated client's functions are named after the handlers, one each."""
    document = _document(live[0])
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)), sorted(ids)
    assert {"create_simulation", "get_events", "post_events", "get_simulator_status"} <= set(ids)
    assert not [i for i in ids if "_api_v2_" in i], ids


@pytest.mark.slow
def test_a_generated_client_type_checks_and_reads_real_answers(
    live: tuple[Server, User], tmp_path: Path,
) -> None:
    """datamodel-codegen on the live document, mypy --strict on a script using its models,
    then the script against the server: typed fields, real values."""
    from ridecast.events.examples import example_event

    srv, user = live
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(_document(srv)))
    generated = subprocess.run(
        [_tool("datamodel-codegen"), "--input", str(spec), "--input-file-type", "openapi",
         "--output", str(tmp_path / "models.py"), "--output-model-type",
         "pydantic_v2.BaseModel", "--target-python-version", "3.11",
         # Constraints as Field arguments, not conint(): mypy accepts only the former.
         "--formatters", "builtin", "--field-constraints", "--collapse-root-models"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=tmp_path,
    )
    assert generated.returncode == 0, generated.stderr
    (tmp_path / "client.py").write_text(CLIENT)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "client.py"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=tmp_path,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    event = example_event("vehicle_use", 1)
    ran = subprocess.run(
        [sys.executable, "client.py", srv.base_url, user.name, user.key, json.dumps(event)],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    with srv.client(user) as http:
        stored = http.get(f"/api/v2/simulation/{seen['simulation_id']}/events").json()
    assert seen["event_ids"] == [e["event_id"] for e in stored["objects"]][:2]
    assert seen["first_page"] == seen["event_ids"][:1]
    assert seen["simulation_id"] in seen["listed"]
    assert sorted(seen["deliveries"]) == sorted(seen["event_ids"])  # vehicle_use: both sent
    assert seen["retried"] == "pending"
    assert seen["template"] in seen["templates"]
    assert seen["renamed"] == "typed again" and seen["deleted"] == 204
    assert seen["webhook_test_ok"] is False  # nothing listens on port 9
    assert seen["started"] == "running" and seen["stopped"] == "stopped"
    assert seen["published"][0] == "bookings"
    assert seen["vehicle_enabled"] is False
