"""``IngestFastPath.start_now`` answers as the full path does, or leaves the request to it.

For random sequences of ingest requests (valid and broken events, batches, other users,
wrong keys, unknown simulations, rates over the limit), one app tries ``start_now`` first
and takes the full path when it declines; another app, without the fast path, serves every
request through FastAPI's route. Status and body must be byte for byte the same, event ids
included, and ``start_now`` must have served some of them. The requests share one
connection's ``SeenCredentials``, as requests with changing keys on one connection would.
"""

from __future__ import annotations

import asyncio
import base64
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ridecast.api.events import SeenCredentials
from ridecast.app import RidecastApp, create_app
from ridecast.config import Settings
from ridecast.events.examples import all_examples
from ridecast.store.accounts import AccountStore
from ridecast.store.engine import create_engine, upgrade

CLIENT = ("10.0.0.1", 1234)
EXAMPLES = all_examples(1)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=8,
)


@st.composite
def events(draw: st.DrawFn) -> Any:
    event: dict[str, Any] = dict(draw(st.sampled_from(EXAMPLES)))
    mutation = draw(st.sampled_from(
        ["none", "none", "none", "sim", "drop", "extra", "ts", "event_id", "type", "deep"]))
    if mutation == "sim":
        event["simulation_id"] = draw(st.sampled_from([1, 2, True, "1", 1.0]))
    elif mutation == "drop":
        event.pop(draw(st.sampled_from(sorted(event))))
    elif mutation == "extra":
        event[draw(st.text(max_size=6))] = draw(json_values)
    elif mutation == "ts":
        event["server_ts"] = draw(st.sampled_from(
            [None, "2026-02-29T10:00:00Z", "2026-11-23 10:00:00+00:00", "x", 3,
             "2026-11-23T10:00:00.123456+01:00"]))
    elif mutation == "event_id":
        event["event_id"] = draw(json_values)
    elif mutation == "type":
        event["message_type"] = draw(st.sampled_from(["nope", None, 7, "gps_data"]))
    elif mutation == "deep":
        value: Any = 1
        for _ in range(draw(st.integers(30, 34))):
            value = [value]
        event["data"] = value
    return event


bodies = st.one_of(
    events().map(orjson.dumps),
    st.lists(events(), max_size=6).map(orjson.dumps),
    st.sampled_from([b"", b"null", b"3", b"{not json", b"[]", b"{}"]),
)
requests = st.lists(
    st.tuples(st.sampled_from(["alice", "alice", "alice", "bob", "wrong", "none", "bearer"]),
              st.sampled_from([1, 1, 1, 999]), bodies),
    min_size=1, max_size=12,
)


def _basic(user: str, key: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()


async def _open(stack: AsyncExitStack, tmp: Path, *, fast: bool
                ) -> tuple[RidecastApp, httpx.AsyncClient, dict[str, str | None]]:
    url = f"sqlite+aiosqlite:///{tmp / f'{fast}.db'}"
    await upgrade(url)
    engine = create_engine(url)
    try:
        accounts = AccountStore(engine)
        _p, key = await accounts.create_user("alice", "org-a")
        _p, other_key = await accounts.create_user("bob", "org-b")
    finally:
        await engine.dispose()
    settings_ = Settings(database_url=url, rate_limit_per_key=0.001, rate_limit_burst=10.0,
                         max_batch_events=5, max_body_bytes=4096)
    app = create_app(settings_, ingest_fast_path=fast)
    await stack.enter_async_context(app.router.lifespan_context(app))
    client = await stack.enter_async_context(httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=CLIENT), base_url="http://test"))
    auths: dict[str, str | None] = {
        "alice": _basic("alice", key), "bob": _basic("bob", other_key),
        "wrong": _basic("alice", "rck_wrong"), "none": None,
        "bearer": "Bearer 5f0c5a57-3c1e-4c51-9a55-2f4d1e0e3b4a",
    }
    created = await client.post("/api/v2/simulation", json={"name": "s", "data": {}},
                                headers={"authorization": auths["alice"] or ""})
    assert created.json()["id"] == 1, created.text
    return app, client, auths


async def _post(client: httpx.AsyncClient, sim: int, auth: str | None,
                body: bytes) -> tuple[int, bytes]:
    headers = {"content-type": "application/json"}
    if auth is not None:
        headers["authorization"] = auth
    response = await client.post(f"/api/v2/simulation/{sim}/events", content=body,
                                 headers=headers)
    return response.status_code, response.content


async def _compare(sequence: list[tuple[str, int, bytes]]) -> int:
    """Both answers to every request of ``sequence``; how many ``start_now`` served."""
    with tempfile.TemporaryDirectory() as folder:
        async with AsyncExitStack() as stack:
            now_app, now_client, now_auths = await _open(stack, Path(folder), fast=True)
            route_app, route_client, route_auths = await _open(stack, Path(folder),
                                                               fast=False)
            fast = now_app.fast_ingest
            assert fast is not None and route_app.fast_ingest is None
            runtime = now_app.state.runtime
            served = 0
            seen = SeenCredentials()  # one connection sends every request, whoever's key
            # Warm the caches the way a producer does: its first request takes the full path.
            sequence = [("alice", 1, orjson.dumps(EXAMPLES[0])), *sequence]
            for who, sim, body in sequence:
                accepted = fast.start_now(runtime, sim, now_auths[who], CLIENT[0], body, seen)
                if accepted is None:
                    got = await _post(now_client, sim, now_auths[who], body)
                else:
                    await accepted.stored
                    got = (201, accepted.created())
                    served += 1
                want = await _post(route_client, sim, route_auths[who], body)
                assert got == want, (who, sim, body)
            return served


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(requests)
def test_start_now_answers_as_the_full_path(sequence: list[tuple[str, int, bytes]]) -> None:
    asyncio.run(_compare(sequence))


def test_start_now_serves_plain_requests() -> None:
    one = orjson.dumps(EXAMPLES[1])
    batch = orjson.dumps(EXAMPLES[:3])
    served = asyncio.run(_compare([("alice", 1, one), ("alice", 1, batch),
                                   ("bob", 1, one), ("alice", 999, one), ("alice", 1, one)]))
    assert served == 3
