"""Templates can be changed and deleted by their owner or an admin (issue 32 item 1), and
listings of simulations and templates stop at RIDECAST_MAX_PAGE_BYTES (item 3).

Against a real server: ETag/If-Match as for simulations, 403 for a member who is not the
owner, 404 for another organisation, a deleted template gone from every read while the
simulations made from it stay, and a template broken in the store repaired by its owner.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.conftest import Server

JSON = {"Content-Type": "application/json"}


def _template(server: Server, user: Any, data: dict[str, Any] | None = None) -> int:
    with server.client(user) as http:
        created = http.post("/api/v2/simulation_template",
                            json={"name": "t", "data": data or {"a": 1}})
        assert created.status_code == 201, created.text
        assert created.headers["ETag"] and created.headers["Location"].endswith(
            f"/{created.json()['id']}")
        return int(created.json()["id"])


def test_patch_replaces_data_and_honours_if_match(server: Server) -> None:
    """PATCH data replaces it whole; a stale If-Match is a 412 that changes nothing; the
    read-only fields of a read-merge-PATCH are ignored, unknown ones refused."""
    owner = server.create_user()
    tpl = _template(server, owner, {"a": 1, "b": 2})
    url = f"/api/v2/simulation_template/{tpl}"
    with server.client(owner) as http:
        read = http.get(url)
        etag = read.headers["ETag"]
        changed = http.patch(url, json={**read.json(), "data": {"c": 3}},
                             headers={"If-Match": etag})
        assert changed.status_code == 200, changed.text
        assert changed.json()["data"] == {"c": 3} and changed.json()["version"] == 2
        assert changed.headers["ETag"] != etag
        stale = http.patch(url, json={"name": "late"}, headers={"If-Match": etag})
        assert stale.status_code == 412 and stale.json()["error"]["code"] == "precondition_failed"
        assert http.get(url).json()["name"] == "t"
        renamed = http.patch(url, json={"name": "n"}, headers={"If-Match": "*"})
        assert renamed.json()["name"] == "n" and renamed.json()["data"] == {"c": 3}
        unknown = http.patch(url, json={"colour": "red"})
        assert unknown.status_code == 400 and "colour" in unknown.text
        bad = http.patch(url, content='{"data":{"\\udfff":1}}', headers=JSON)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
        not_object = http.patch(url, json={"data": [1]})
        assert not_object.status_code == 400
        assert http.get(url).json()["data"] == {"c": 3}


def test_only_the_owner_or_an_admin_changes_or_deletes(server: Server) -> None:
    """A member who can read it gets 403 not_owner; another organisation 404; an admin
    may change and delete it."""
    owner = server.create_user()
    member = server.create_user(owner.org)
    stranger = server.create_user()
    admin = server.create_user(admin=True)
    tpl = _template(server, owner)
    url = f"/api/v2/simulation_template/{tpl}"
    with server.client(member) as http:
        assert http.get(url).status_code == 200
        for response in (http.patch(url, json={"name": "x"}), http.delete(url)):
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "not_owner"
    with server.client(stranger) as http:
        for response in (http.get(url), http.patch(url, json={"name": "x"}), http.delete(url)):
            assert response.status_code == 404, response.text
            assert response.json()["error"]["code"] == "template_not_found"
    with server.client(admin) as http:
        assert http.patch(url, json={"name": "by admin"}).json()["name"] == "by admin"
        assert http.delete(url).status_code == 204
    with server.client(owner) as http:
        assert http.get(url).status_code == 404


def test_a_deleted_template_is_gone_and_its_simulations_stay(server: Server) -> None:
    """After DELETE: 404 on read, change and delete, absent from the list, refused as a
    template_id; simulations made from it keep their data and template_id."""
    owner = server.create_user()
    tpl = _template(server, owner, {"seed": 7})
    url = f"/api/v2/simulation_template/{tpl}"
    with server.client(owner) as http:
        made = http.post("/api/v2/simulation", json={"name": "s", "template_id": tpl}).json()
        assert http.delete(url).status_code == 204
        assert http.get(url).status_code == 404
        assert http.delete(url).status_code == 404
        assert http.patch(url, json={"name": "x"}).status_code == 404
        listed = http.get("/api/v2/simulation_template").json()
        assert tpl not in [t["id"] for t in listed["objects"]]
        again = http.post("/api/v2/simulation", json={"name": "s", "template_id": tpl})
        assert again.status_code == 404
        assert again.json()["error"]["code"] == "template_not_found"
        kept = http.get(f"/api/v2/simulation/{made['id']}").json()
        assert kept["template_id"] == tpl and kept["data"] == {"seed": 7}


def test_a_template_broken_in_the_store_can_be_repaired_or_deleted(server: Server) -> None:
    """A row holding a lone surrogate (written straight into the store) is listed safely,
    and its owner can replace its data or delete it."""
    owner = server.create_user()
    broken, other = _template(server, owner), _template(server, owner)
    path = server.database_url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE simulation_templates SET data = ? WHERE id IN (?, ?)",
                   ('{"x": "\\ud800"}', broken, other))
    with server.client(owner) as http:
        assert http.get("/api/v2/simulation_template").status_code == 200
        fixed = http.patch(f"/api/v2/simulation_template/{broken}", json={"data": {"x": "ok"}})
        assert fixed.status_code == 200 and fixed.json()["data"] == {"x": "ok"}
        assert http.delete(f"/api/v2/simulation_template/{other}").status_code == 204


def _pages(http: Any, url: str) -> list[list[dict[str, Any]]]:
    pages, offset = [], 0
    while offset is not None:
        response = http.get(url, params={"offset": offset, "limit": 1000})
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(body["objects"])
        offset = body["meta"]["next_offset"]
        assert len(pages) < 50
    return pages


def test_listings_stop_at_the_byte_budget(start_server: Any) -> None:
    """Simulations and templates of ~180 kB each, under a 400 kB budget: two a page,
    truncated, and next_offset reaches every one, in order."""
    server: Server = start_server({"RIDECAST_MAX_PAGE_BYTES": "400000"})
    owner = server.create_user()
    big = {"blob": ["x" * 60_000] * 3}
    sims = [server.create_simulation(owner, big) for _ in range(5)]
    tpls = [_template(server, owner, big) for _ in range(5)]
    with server.client(owner) as http:
        for url, ids in (("/api/v2/simulation", sims), ("/api/v2/simulation_template", tpls)):
            pages = _pages(http, url)
            assert [len(page) for page in pages] == [2, 2, 1], url
            assert [row["id"] for page in pages for row in page] == ids
            first = http.get(url).json()["meta"]
            assert first["truncated"] is True and first["next_offset"] == 2


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_the_budget_counts_bytes_not_characters(
    start_server: Any, store: str, request: pytest.FixtureRequest,
) -> None:
    """Rows of 60,000 three-byte characters (180 kB each in the response) under a 400 kB
    budget, on both stores: no page of more than one row passes the budget in bytes (the
    budget counts stored characters, which must never be fewer than the bytes sent), and
    next_offset reaches every row in order."""
    budget = 400_000
    url_kw = {} if store == "sqlite" else {"database_url": request.getfixturevalue("pg_url")}
    server: Server = start_server({"RIDECAST_MAX_PAGE_BYTES": str(budget)}, **url_kw)
    owner = server.create_user()
    big = {"blob": "€" * 60_000}
    sims = [server.create_simulation(owner, big) for _ in range(5)]
    tpls = [_template(server, owner, big) for _ in range(5)]
    with server.client(owner) as http:
        for url, ids in (("/api/v2/simulation", sims), ("/api/v2/simulation_template", tpls)):
            offset: int | None = 0
            seen: list[int] = []
            while offset is not None:
                page = http.get(url, params={"offset": offset, "limit": 100})
                rows = page.json()["objects"]
                assert len(rows) == 1 or len(page.content) <= budget, (url, len(page.content))
                seen += [row["id"] for row in rows]
                offset = page.json()["meta"]["next_offset"]
                assert len(seen) <= len(ids)
            assert seen == ids, url
