"""The cross-site refusals are in the OpenAPI document (issue 50, follow-up).

Every status the server answers is listed in ``/openapi.json``: the 403
``cross_origin_refused`` and the 415 ``unsupported_media_type`` of ``api/crosssite.py`` apply
to every state-changing operation, so each one lists both, with the error schema and the
code in the description. The document is read from a real server, and a real request to
every such operation is answered with each status, so document and server are compared on
the same operations.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.conftest import Server

STATE_CHANGING = ("post", "put", "patch", "delete")
ERROR_REF = "#/components/schemas/Error"
EVIL = "https://evil.example"


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, operation)
            for path, operations in document["paths"].items()
            for method, operation in operations.items() if method in STATE_CHANGING]


def _concrete(path: str, simulation_id: int) -> str:
    """The path with its parameters filled: the simulation's id, any number for the rest
    (the refusal comes before routing, so the rest need not exist)."""
    path = path.replace("{simulation_id}", str(simulation_id))
    return re.sub(r"\{[^}]+\}", "1", path)


def test_every_state_changing_operation_lists_403_and_415(server: Server) -> None:
    """Each POST/PUT/PATCH/DELETE of the live document lists 403 and 415 as the error
    schema, naming ``cross_origin_refused`` and ``unsupported_media_type``."""
    with httpx.Client(base_url=server.base_url) as http:
        document = http.get("/openapi.json").json()
    operations = _operations(document)
    assert len(operations) >= 20, [f"{m} {p}" for p, m, _ in operations]
    assert document["components"]["schemas"]["Error"]["required"] == ["error"]
    for path, method, operation in operations:
        responses = operation["responses"]
        for status, code in (("403", "cross_origin_refused"), ("415", "unsupported_media_type")):
            assert status in responses, f"{method.upper()} {path} does not list {status}"
            response = responses[status]
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": ERROR_REF}, (method, path, status, schema)
            assert f"`{code}`" in response["description"], (method, path, response)
    # A quota's 403 and a template's not_owner are kept beside the cross-site code.
    by_key = {(p, m): o for p, m, o in operations}
    created = by_key[("/api/v2/simulation", "post")]["responses"]["403"]["description"]
    assert "`quota_simulations`" in created and "`cross_origin_refused`" in created
    shared = by_key[("/api/v2/simulation_template/{template_id}", "delete")]
    assert "`not_owner`" in shared["responses"]["403"]["description"]


def test_every_state_changing_operation_answers_the_listed_403_and_415(server: Server) -> None:
    """A real request from a foreign Origin gets 403 and a body labelled ``text/plain``
    gets 415 on every state-changing operation of the document, each with its code, and
    the document lists that status for that operation; nothing is created."""
    user = server.create_user()
    simulation_id = server.create_simulation(user)
    with server.client(user) as http:
        document = http.get("/openapi.json").json()
        before = http.get("/api/v2/simulation?limit=1000").json()["objects"]
        for path, method, operation in _operations(document):
            url = _concrete(path, simulation_id)
            foreign = http.request(method.upper(), url, json={}, headers={"Origin": EVIL})
            plain = http.request(method.upper(), url, content=b"{}",
                                 headers={"Content-Type": "text/plain"})
            for response, status, code in ((foreign, 403, "cross_origin_refused"),
                                           (plain, 415, "unsupported_media_type")):
                assert response.status_code == status, (method, path, response.text)
                assert response.json()["error"]["code"] == code, (method, path, response.text)
                assert str(status) in operation["responses"], (method, path, status)
        assert http.get("/api/v2/simulation?limit=1000").json()["objects"] == before
        assert http.get(f"/api/v2/simulation/{simulation_id}/events").json()["objects"] == []
