"""Hostile strings in every string field of every request body (issue 32, "Done means").

hypothesis draws strings of lone surrogates, control characters, astral-plane characters
and ASCII into every string field, free-form key and value of every JSON request body the
OpenAPI document lists, sent escaped (``\\ud800``) or raw (invalid UTF-8 for a lone
surrogate), against a real server on each store (SQLite, then PostgreSQL: issue 50). No
answer is a 5xx, and every listing keeps answering 200 after every request. A body-taking
operation added to the API without a place here fails ``test_every_body_is_swept``. The
same strings go into every string query parameter and into the credentials.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ridecast.events.examples import all_examples
from tests.conftest import Server, server_per_store

_STORABLE = [
    st.characters(categories=["Cc"]),  # control characters, NUL included
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF),  # astral plane
    st.characters(max_codepoint=0x7F),
]
HOSTILE = st.text(alphabet=st.one_of(st.characters(categories=["Cs"]), *_STORABLE),
                  max_size=12)
"""Strings that may hold lone surrogates (the body is then refused whole)."""
STORABLE = st.text(alphabet=st.one_of(*_STORABLE), max_size=12)
"""Strings without lone surrogates: control and astral characters that must be stored (a
NUL among them is refused, 400 unsupported_character, on both stores alike)."""
EXAMPLES = 25  # per operation: bounded, the whole module well under a minute


server = server_per_store("sweep")


@pytest.fixture(scope="module")
def world(server: Server) -> Iterator[dict[str, Any]]:
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        template = http.post("/api/v2/simulation_template", json={"name": "t"}).json()["id"]
        schema = http.get("/openapi.json").json()
        yield {"server": server, "user": user, "sim": sim, "template": template,
               "schema": schema, "http": http}


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = root["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _takes_text(schema: dict[str, Any], root: dict[str, Any]) -> bool:
    """True when ``schema`` allows a string or an object (free-form data), not when it is
    a read-only field a PATCH ignores."""
    schema = _resolve(schema, root)
    if schema.get("description", "").startswith("Read-only"):
        return False
    kinds: list[Any] = [schema.get("type")]
    kinds += [_resolve(o, root).get("type") for o in schema.get("anyOf", [])]
    flat = {k for kind in kinds for k in (kind if isinstance(kind, list) else [kind])}
    return bool(flat & {"string", "object"}) or not flat - {None}


def fill(schema: dict[str, Any], root: dict[str, Any], draw: Callable[[], str]) -> Any:
    """A value of ``schema`` whose every string (and a key of every free-form object) is
    ``draw()``n; other scalars take a plain value within their bounds."""
    schema = _resolve(schema, root)
    options = schema.get("oneOf") or schema.get("anyOf")
    if options:
        options = [o for o in options if _resolve(o, root).get("type") != "null"]
        return fill(options[0], root, draw)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        props = schema.get("properties")
        if not props:
            return {draw(): draw(), "nested": [draw(), {draw(): draw()}]}
        required = set(schema.get("required", ()))
        return {name: fill(sub, root, draw) for name, sub in props.items()
                if name in required or _takes_text(sub, root)}
    if kind == "array":
        return [fill(schema.get("items", {}), root, draw)]
    if kind == "string":
        return draw()
    if kind in ("integer", "number"):
        return max(0, schema.get("minimum", 0))
    if kind == "boolean":
        return True
    return draw()  # untyped: free-form


def _event(sim: int, index: int, field: int | None,
           draw: Callable[[], str]) -> dict[str, Any]:
    """A real example event with hostile extra fields (stored as sent) and, when ``field``
    is given, a hostile value in one of its own string fields (``data``'s included)."""
    event = all_examples(sim)[index % 18]
    event[draw()] = draw()
    event["note"] = {draw(): [draw()]}
    if field is not None:
        slots = [(event, k) for k, v in event.items() if isinstance(v, str)]
        if isinstance(event.get("data"), dict):
            slots += [(event["data"], k) for k, v in event["data"].items() if isinstance(v, str)]
        holder, key = slots[field % len(slots)]
        holder[key] = draw()
    return event


STATUSES: dict[str, set[int]] = {}  # what each operation answered, for the last test

OPERATIONS: dict[str, tuple[str, str]] = {
    "post_events": ("POST", "/api/v2/simulation/{sim}/events"),
    "create_simulation": ("POST", "/api/v2/simulation"),
    "patch_simulation": ("PATCH", "/api/v2/simulation/{sim}"),
    "create_template": ("POST", "/api/v2/simulation_template"),
    "patch_template": ("PATCH", "/api/v2/simulation_template/{template}"),
    "create_booking": ("POST", "/api/v2/simulation/{sim}/bookings"),
    "push_position": ("POST", "/api/v2/simulation/{sim}/vehicles/1/position"),
    "node_status": ("POST", "/api/v2/simulation/{sim}/nodes/1/status"),
    "start_simulator": ("POST", "/api/v2/simulation/{sim}/simulator/start"),
    "pause_simulator": ("POST", "/api/v2/simulation/{sim}/simulator/pause"),
    "resume_simulator": ("POST", "/api/v2/simulation/{sim}/simulator/resume"),
    "stop_simulator": ("POST", "/api/v2/simulation/{sim}/simulator/stop"),
}


def _bodies(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """operationId -> JSON request body schema, for every operation that takes one."""
    out = {}
    for operations in schema["paths"].values():
        for operation in operations.values():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                out[operation["operationId"]] = body["schema"]
    return out


def test_every_body_is_swept(world: dict[str, Any]) -> None:
    """Each operation with a JSON body in /openapi.json has its place in OPERATIONS."""
    assert set(_bodies(world["schema"])) == set(OPERATIONS)


def _listings_answer(http: httpx.Client, sim: int, template: int) -> None:
    for url in ("/api/v2/simulation?limit=1000", "/api/v2/simulation_template",
                f"/api/v2/simulation/{sim}", f"/api/v2/simulation_template/{template}",
                f"/api/v2/simulation/{sim}/events?limit=1000"):
        response = http.get(url)
        assert response.status_code == 200, (url, response.text[:300])


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_strings_never_get_a_5xx_nor_break_a_listing(
    world: dict[str, Any], operation: str, data: st.DataObject,
) -> None:
    """One request with hostile strings everywhere; then every listing still answers."""
    http: httpx.Client = world["http"]
    sim, template = world["sim"], world["template"]

    strings = HOSTILE if data.draw(st.booleans()) else STORABLE

    def draw() -> str:
        return data.draw(strings)

    if operation == "post_events":
        body: Any = _event(sim, data.draw(st.integers(0, 17)),
                           data.draw(st.none() | st.integers(0, 50)), draw)
    else:
        body = fill(_bodies(world["schema"])[operation], world["schema"], draw)
        if isinstance(body, dict) and data.draw(st.booleans()):
            body[draw()] = draw()  # an unknown field with a hostile name
    method, path = OPERATIONS[operation]
    url = path.format(sim=sim, template=template)
    escaped = data.draw(st.booleans())
    text = json.dumps(body, ensure_ascii=escaped)
    # Raw: a lone surrogate becomes the bytes UTF-8 forbids, as a hostile client sends them.
    content = text.encode("utf-8", "surrogatepass")
    response = http.request(method, url, content=content,
                            headers={"Content-Type": "application/json"})
    assert response.status_code < 500, (operation, body, response.text[:300])
    STATUSES.setdefault(operation, set()).add(response.status_code)
    if response.status_code >= 400:
        assert response.json()["error"]["code"], response.text
    # json.dumps writes a NUL as the escape: refused on both stores (unsupported_character).
    assert not (response.status_code < 300 and "\\u0000" in text), body
    _listings_answer(http, sim, template)


QUERIES: dict[str, list[str]] = {
    "/api/v2/simulation/{sim}/events": ["after", "message_type"],
    "/api/v2/simulation/{sim}/webhook_deliveries": ["status", "message_type", "after"],
    "/api/v2/simulation": ["limit", "offset"],
    "/api/v2/simulation_template": ["limit", "offset"],
}


@pytest.mark.parametrize("path", sorted(QUERIES))
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_query_strings_never_get_a_5xx(world: dict[str, Any], path: str,
                                                data: st.DataObject) -> None:
    """Each query parameter of the listings given a hostile string: a 200 or a 400 with
    its code, never a 5xx, on both stores."""
    http: httpx.Client = world["http"]
    name = data.draw(st.sampled_from(QUERIES[path]))
    value = data.draw(STORABLE)
    response = http.get(path.format(sim=world["sim"]), params={name: value})
    assert response.status_code < 500, (path, name, value, response.text[:300])
    if response.status_code >= 400:
        assert response.json()["error"]["code"], response.text


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=STORABLE, key=STORABLE)
def test_hostile_credentials_never_get_a_5xx(world: dict[str, Any], name: str,
                                             key: str) -> None:
    """A user name and key of hostile characters (NUL included) in HTTP Basic and as a
    token: 401, never a 5xx, on both stores."""
    base = world["server"].base_url
    for auth in (httpx.BasicAuth(name or "x", key or "y"),):
        with httpx.Client(base_url=base, auth=auth, timeout=30) as anon:
            response = anon.get("/api/v2/simulation")
            assert response.status_code in (401, 429), response.text[:300]
    token = base64.b64encode(f"{name}:{key}".encode()).decode()
    with httpx.Client(base_url=base, timeout=30) as anon:
        response = anon.get("/api/v2/simulation", headers={"Authorization": f"Token {token}"})
        assert response.status_code in (401, 429), response.text[:300]


def test_the_sweep_stored_hostile_strings() -> None:
    """The sweep was not all refusals: strings without a lone surrogate (control and astral
    characters) were stored through every route that stores them."""
    for operation in ("post_events", "create_simulation", "patch_simulation",
                      "create_template", "patch_template"):
        assert STATUSES.get(operation, set()) & {200, 201}, (operation, STATUSES.get(operation))
