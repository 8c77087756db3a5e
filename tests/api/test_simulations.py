"""Simulations and templates: data replaced whole, ETag/If-Match, templates, visibility."""

from __future__ import annotations

from tests.conftest import Server


def test_patch_replaces_data_whole_and_slashes_both_work(server: Server) -> None:
    """Interface rule 1: keys not resent are erased; paths work with and without '/'."""
    user = server.create_user()
    sim = server.create_simulation(user, {"a": 1, "b": 2})
    with server.client(user) as http:
        patched = http.patch(f"/api/v2/simulation/{sim}/", json={"data": {"c": 3}})
        assert patched.status_code == 200, patched.text
        assert http.get(f"/api/v2/simulation/{sim}").json()["data"] == {"c": 3}
        assert http.get("/api/v2/user/token").status_code == 200
        assert http.get("/api/v2/simulation/").status_code == 200


def test_read_merge_patch_with_if_match(server: Server) -> None:
    """Interface rule 2 made safe: a stale If-Match is 412, a fresh one merges."""
    user = server.create_user()
    sim = server.create_simulation(user, {"keep": True})
    with server.client(user) as http:
        first = http.get(f"/api/v2/simulation/{sim}")
        etag = first.headers["etag"]
        merged = first.json()["data"] | {
            "messaging_webhook_url": "http://127.0.0.1:9/hook",
            "messaging_webhook_message_types": ["bookings", "offers"],
        }
        assert http.patch(f"/api/v2/simulation/{sim}", json={"data": merged},
                          headers={"If-Match": etag}).status_code == 200
        stale = http.patch(f"/api/v2/simulation/{sim}", json={"data": {}},
                           headers={"If-Match": etag})
        assert stale.status_code == 412
        assert stale.json()["error"]["code"] == "precondition_failed"
        data = http.get(f"/api/v2/simulation/{sim}").json()["data"]
    assert data["keep"] is True
    assert data["messaging_webhook_message_types"] == ["bookings", "offers"]


def test_webhook_types_are_checked(server: Server) -> None:
    """Unknown filter types and non-http URLs are a 400 naming the bad value."""
    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        bad_type = http.patch(f"/api/v2/simulation/{sim}", json={"data": {
            "messaging_webhook_url": "http://127.0.0.1:9/", "messaging_webhook_message_types":
            ["bookings", "bogus"]}})
        assert bad_type.status_code == 400
        assert "bogus" in bad_type.json()["error"]["message"]
        assert "offer_accepted" in bad_type.json()["error"]["details"][0]["valid"]
        bad_url = http.patch(f"/api/v2/simulation/{sim}", json={"data": {
            "messaging_webhook_url": "ftp://example.org/x"}})
        assert bad_url.status_code == 400
        assert "ftp://example.org/x" in bad_url.json()["error"]["message"]


def test_template_data_is_inherited(server: Server) -> None:
    """Interface rule 3: a simulation made from a template carries its webhook settings."""
    user = server.create_user()
    settings = {"messaging_webhook_url": "http://127.0.0.1:9/t",
                "messaging_webhook_message_types": ["assignment"]}
    with server.client(user) as http:
        tpl = http.post("/api/v2/simulation_template", json={"name": "t", "data": settings})
        assert tpl.status_code == 201, tpl.text
        tpl_id = tpl.json()["id"]
        listed = http.get("/api/v2/simulation_template").json()["objects"]
        assert tpl_id in [t["id"] for t in listed]
        sim = http.post("/api/v2/simulation", json={"name": "from-t", "template_id": tpl_id})
        assert sim.status_code == 201
        assert sim.json()["data"] == settings
        assert sim.json()["template_id"] == tpl_id
    stranger = server.create_user()
    with server.client(stranger) as http:
        assert http.get(f"/api/v2/simulation_template/{tpl_id}").status_code == 404
        refused = http.post("/api/v2/simulation", json={"name": "x", "template_id": tpl_id})
        assert refused.json()["error"]["code"] == "template_not_found"


def test_visibility_same_org_and_admin(server: Server) -> None:
    """Same organisation and admins see a simulation; deleting it hides it from all."""
    owner = server.create_user()
    colleague = server.create_user(org=owner.org)
    admin = server.create_user(admin=True)
    sim = server.create_simulation(owner)
    for user in (colleague, admin):
        with server.client(user) as http:
            assert http.get(f"/api/v2/simulation/{sim}").status_code == 200
    with server.client(colleague) as http:
        assert http.delete(f"/api/v2/simulation/{sim}").status_code == 204
    with server.client(owner) as http:
        assert http.get(f"/api/v2/simulation/{sim}").status_code == 404


def test_history_pages_in_order_and_filters(server: Server) -> None:
    """after= pages through history; message_type filters (repeated or comma list)."""
    from ridecast.events.examples import all_examples

    user = server.create_user()
    sim = server.create_simulation(user)
    with server.client(user) as http:
        http.post(f"/api/v2/simulation/{sim}/events", json=all_examples(sim)).raise_for_status()
        seen, after = [], None
        while True:
            page = http.get(f"/api/v2/simulation/{sim}/events",
                            params={"limit": 5, **({"after": after} if after else {})}).json()
            seen += page["objects"]
            after = page["meta"]["next_after"]
            if not after:
                break
        assert len(seen) == 18 and len({e["event_id"] for e in seen}) == 18
        only = http.get(f"/api/v2/simulation/{sim}/events",
                        params={"message_type": ["gps_data,offers", "no_offer"]}).json()
        assert sorted(e["message_type"] for e in only["objects"]) == [
            "gps_data", "no_offer", "offers"]


def test_openapi_and_asyncapi_are_generated(server: Server) -> None:
    """The documents carry every event model."""
    import httpx

    openapi = httpx.get(f"{server.base_url}/openapi.json").json()
    assert "GpsDataEvent" in openapi["components"]["schemas"]
    assert "/api/v2/simulation/{simulation_id}/events" in openapi["paths"]
    asyncapi = httpx.get(f"{server.base_url}/asyncapi.json").json()
    assert len(asyncapi["components"]["messages"]) == 18
    metrics = httpx.get(f"{server.base_url}/metrics").text
    assert "ridecast_events_ingested_total" in metrics
