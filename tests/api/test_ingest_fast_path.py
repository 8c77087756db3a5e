"""The ingest fast path answers every request exactly as the FastAPI route does.

``POST /api/v2/simulation/{id}/events`` is served straight from ``BodyGuard`` (issue 14:
FastAPI's routing and dependency solving cost more than the ingest). Two apps in this
process, one with the fast path switched off, get the same requests in the same order; the
status, the headers that matter and the body must be byte for byte the same.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
import orjson

from ridecast.app import create_app
from ridecast.config import Settings
from ridecast.events.examples import all_examples
from ridecast.store.accounts import AccountStore
from ridecast.store.engine import create_engine, upgrade

FAST_SERVED: dict[str, int] = {}
HEADERS = ("content-type", "content-length", "www-authenticate", "retry-after", "allow")


@asynccontextmanager
async def _app(tmp: Path, name: str, *, fast: bool) -> AsyncIterator[httpx.AsyncClient]:
    url = f"sqlite+aiosqlite:///{tmp / f'{name}.db'}"
    await upgrade(url)
    engine = create_engine(url)
    try:
        accounts = AccountStore(engine)
        _p, key = await accounts.create_user("alice", "org-a")
        _p, other_key = await accounts.create_user("bob", "org-b")
    finally:
        await engine.dispose()
    settings = Settings(database_url=url, rate_limit_per_key=0.001, rate_limit_burst=17.0,
                        max_batch_events=5, max_body_bytes=4096)
    app = create_app(settings, ingest_fast_path=fast)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        client = await stack.enter_async_context(httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, client=("10.0.0.1", 1234)),
            base_url="http://test"))
        created = await client.post("/api/v2/simulation", json={"name": "s", "data": {}},
                                    headers={"authorization": _basic("alice", key)})
        assert created.json()["id"] == 1, created.text
        client.headers["x-keys"] = f"{key} {other_key}"
        yield client
        if app.fast_ingest is not None:
            FAST_SERVED[name] = app.fast_ingest.served


def _basic(user: str, key: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()


def _requests(key: str, other_key: str) -> list[tuple[str, bytes, dict[str, str]]]:
    alice = {"authorization": _basic("alice", key), "content-type": "application/json"}
    bob = {"authorization": _basic("bob", other_key), "content-type": "application/json"}
    example = all_examples(1)[0]
    events = "/api/v2/simulation/1/events"
    bad = {**example, "message_type": "nope"}
    return [
        (events, orjson.dumps(example), alice),
        (events + "/", orjson.dumps([example, example]), alice),
        (events, b"[]", alice),
        (events, b"3", alice),
        (events, orjson.dumps([example, bad, {"x": 1}]), alice),
        (events, orjson.dumps([example] * 6), alice),
        (events, orjson.dumps({**example, "simulation_id": 2}), alice),
        (events, orjson.dumps({k: v for k, v in example.items() if k != "data"}), alice),
        (events, orjson.dumps(example), bob),  # another organisation's: 404
        ("/api/v2/simulation/999/events", orjson.dumps(example), alice),
        ("/api/v2/simulation/01/events", orjson.dumps(example), alice),
        ("/api/v2/simulation/-1/events", orjson.dumps(example), alice),
        ("/api/v2/simulation/99999999999999999999/events", orjson.dumps(example), alice),
        ("/api/v2/simulation/x/events", orjson.dumps(example), alice),
        (events, orjson.dumps(example), {"content-type": "application/json"}),
        (events, orjson.dumps(example), {"authorization": _basic("alice", "wrong"),
                                         "content-type": "application/json"}),
        (events, orjson.dumps(example), {"authorization": "Token nope",
                                         "content-type": "application/json"}),
        (events, orjson.dumps(example), {**alice, "origin": "https://evil.example"}),
        (events, orjson.dumps(example), {"authorization": alice["authorization"]}),
        (events, b"{not json", alice),
        (events, b"", alice),
        (events, orjson.dumps(example), {**alice, "content-type": "text/plain"}),
        (events, orjson.dumps([example] * 20), alice),  # over max_body_bytes: 413
        (events, b"[" * 40 + b"]" * 40, alice),  # over the JSON depth: 400
        (events, b'{"message_type": 18446744073709551615}', alice),  # over 64 bits: 400
        (events, b"null", alice),
        # A burst of 17 per key, hardly refilled: the last ones are over the rate.
        *[(events, orjson.dumps(example), alice) for _ in range(4)],
    ]


async def test_fast_path_answers_as_the_route_does(
    tmp_path: Path,
) -> None:
    answers: dict[bool, list[tuple[int, dict[str, str], bytes]]] = {}
    for fast in (True, False):
        async with _app(tmp_path, f"fast-{fast}", fast=fast) as client:
            key, other_key = client.headers.pop("x-keys").split()
            answers[fast] = []
            for path, body, headers in _requests(key, other_key):
                response = await client.post(path, content=body, headers=headers)
                kept = {h: response.headers[h] for h in HEADERS if h in response.headers}
                answers[fast].append((response.status_code, kept, response.content))
                await asyncio.sleep(0)
    assert FAST_SERVED.get("fast-True", 0) >= 10  # it did serve most of them
    statuses = [a[0] for a in answers[True]]
    assert 201 in statuses and 400 in statuses and 401 in statuses and 404 in statuses
    assert 403 in statuses and 415 in statuses
    assert 429 in statuses and 413 in statuses
    for index, (fast, slow) in enumerate(zip(answers[True], answers[False], strict=True)):
        assert fast == slow, f"request {index}"
