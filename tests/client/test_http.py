"""Client and AsyncClient against a real server: token, simulations, webhook merge, history."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from ridecast.client import (
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    NotFoundError,
    PreconditionFailedError,
    TransportError,
)
from ridecast.client.calls import MAX_WEBHOOK_ATTEMPTS
from ridecast.events import parse_event
from ridecast.events.examples import example_event
from tests.conftest import Server, free_port


def client_for(server: Server) -> Client:
    user = server.create_user()
    return Client(server.base_url, user=user.name, key=user.key)


def test_token_with_basic_and_with_token_header(server: Server) -> None:
    """A token comes back with HTTP Basic and with 'Authorization: Token <key>'."""
    user = server.create_user()
    with Client(server.base_url, user=user.name, key=user.key) as basic:
        assert len(basic.token()) == 36
    with Client(server.base_url, key=user.key) as token_only:
        assert len(token_only.token()) == 36


def test_environment_supplies_the_connection(server: Server,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """RIDECAST_URL, RIDECAST_USER and RIDECAST_API_KEY configure a client built bare."""
    user = server.create_user()
    monkeypatch.setenv("RIDECAST_URL", server.base_url)
    monkeypatch.setenv("RIDECAST_USER", user.name)
    monkeypatch.setenv("RIDECAST_API_KEY", user.key)
    with Client() as client:
        assert client.token()


def test_simulation_lifecycle(server: Server) -> None:
    """Create, list, get (with ETag), patch and delete a simulation."""
    with client_for(server) as client:
        sim = client.create_simulation("first", {"a": 1})
        assert sim.etag and sim.data == {"a": 1}
        assert [s.id for s in client.list_simulations()] == [sim.id]
        got = client.get_simulation(sim.id)
        assert got.etag == sim.etag and got.name == "first"
        patched = client.patch_simulation(sim.id, name="renamed", if_match=got.etag)
        assert patched.name == "renamed" and patched.data == {"a": 1}
        assert patched.etag != got.etag
        with pytest.raises(PreconditionFailedError) as stale:
            client.patch_simulation(sim.id, data={}, if_match=got.etag)
        assert stale.value.code == "precondition_failed" and stale.value.status == 412
        client.delete_simulation(sim.id)
        with pytest.raises(NotFoundError):
            client.get_simulation(sim.id)


def test_set_webhook_keeps_other_keys_and_clear_removes_only_its_own(server: Server) -> None:
    """set_webhook merges into data (spec rule 2); clear_webhook leaves the rest alone."""
    with client_for(server) as client:
        sim = client.create_simulation("hooks", {"simulator": {"seed": 3}, "note": "keep me"})
        secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        updated = client.set_webhook(sim.id, "http://127.0.0.1:9/h", ["assignment", "bookings"],
                                     secret=secret)
        assert updated.data == {
            "simulator": {"seed": 3}, "note": "keep me",
            "messaging_webhook_url": "http://127.0.0.1:9/h",
            "messaging_webhook_message_types": ["assignment", "bookings"],
            "messaging_webhook_secret": secret,
        }
        again = client.set_webhook(sim.id, "http://127.0.0.1:9/other", ["offers"])
        assert again.webhook_signed and again.webhook_types == ["offers"]
        cleared = client.clear_webhook(sim.id)
        assert cleared.data == {"simulator": {"seed": 3}, "note": "keep me"}


def test_set_webhook_survives_a_concurrent_writer(server: Server) -> None:
    """A 412 from a racing writer makes set_webhook read again: both writers' keys survive."""
    user = server.create_user()
    raced = threading.Event()

    def racing_writer(request: httpx.Request) -> None:
        # Just before our PATCH lands, another writer adds a key (changing the ETag).
        if request.method == "PATCH" and not raced.is_set():
            raced.set()
            with server.client(user) as other:
                current = other.get(request.url.path)
                data = {**current.json()["data"], "theirs": True}
                other.patch(request.url.path, json={"data": data},
                            headers={"If-Match": current.headers["ETag"]}).raise_for_status()

    with Client(server.base_url, user=user.name, key=user.key) as client:
        sim = client.create_simulation("race", {"mine": 1})
        client._http.event_hooks["request"] = [racing_writer]
        result = client.set_webhook(sim.id, "http://127.0.0.1:9/h", ["assignment"])
    assert raced.is_set()
    assert result.data["theirs"] is True and result.data["mine"] == 1
    assert result.webhook_url == "http://127.0.0.1:9/h"
    assert MAX_WEBHOOK_ATTEMPTS > 1


def test_post_events_and_page_through_history(server: Server) -> None:
    """Posted events (dicts or models) come back in order, typed, page by page."""
    with client_for(server) as client:
        sim = client.create_simulation("history")
        events = [example_event(t, sim.id) for t in ("bookings", "gps_data", "vehicle_use")] * 3
        ids = client.post_events(sim.id, events[:8])
        ids += client.post_events(sim.id, parse_event(events[8]))
        assert len(ids) == 9
        first = client.events(sim.id, limit=4)
        assert [e.event_id for e in first.events] == ids[:4]
        assert first.next_after == ids[3]
        assert [e.event_id for e in client.history(sim.id, page_size=4)] == ids
        only = client.events(sim.id, message_type=["gps_data", "bookings"])
        assert {e.message_type for e in only.events} == {"gps_data", "bookings"}
        assert type(only.events[0]).__name__ == "BookingsEvent"


def test_errors_are_typed(server: Server) -> None:
    """Bad credentials, bad input and unknown ids raise the SDK's typed errors."""
    with Client(server.base_url, user="nobody", key="wrong") as stranger, \
            pytest.raises(AuthenticationError) as auth:
        stranger.token()
    assert auth.value.code == "invalid_credentials"
    with client_for(server) as client:
        with pytest.raises(NotFoundError) as missing:
            client.get_simulation(10**9)
        assert missing.value.code == "simulation_not_found"
        sim = client.create_simulation("bad")
        with pytest.raises(BadRequestError) as bad:
            client.patch_simulation(sim.id, data={"messaging_webhook_url": "ftp://x"})
        assert bad.value.code == "invalid_simulation_data" and bad.value.details


def test_unreachable_server_is_a_transport_error() -> None:
    """Nothing listening is a TransportError, not an httpx exception."""
    with Client(f"http://127.0.0.1:{free_port()}", key="k", timeout=2) as client, \
            pytest.raises(TransportError):
        client.token()


async def test_async_client_does_the_same(server: Server) -> None:
    """AsyncClient: token, create, set_webhook merge, post and history."""
    user = await asyncio.to_thread(server.create_user)
    async with AsyncClient(server.base_url, user=user.name, key=user.key) as client:
        assert await client.token()
        sim = await client.create_simulation("async", {"keep": [1, 2]})
        updated = await client.set_webhook(sim.id, "http://127.0.0.1:9/h", ["offers"])
        assert updated.data["keep"] == [1, 2] and updated.webhook_types == ["offers"]
        assert (await client.clear_webhook(sim.id)).data == {"keep": [1, 2]}
        ids = await client.post_events(sim.id, [example_event("offers", sim.id)] * 3)
        assert [e.event_id async for e in client.history(sim.id, page_size=2)] == ids
        assert (await client.get_simulation(sim.id)).etag
        with pytest.raises(NotFoundError):
            await client.delete_simulation(10**9)
