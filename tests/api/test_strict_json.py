"""One strict JSON decoder on every route (issue 32 item 1), against a real server.

A lone surrogate is a 400 ``invalid_json`` and stores nothing; an integer beyond 64 bits is a
400 ``json_limit_exceeded`` on every route, an ingest envelope's extra fields included; a row
that holds what no response can encode (written straight into the store) never takes a
listing down.
"""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest

from ridecast.events.examples import example_event
from tests.conftest import Server

JSON = {"Content-Type": "application/json"}


def _counts(http: httpx.Client, sim: int) -> tuple[int, int, int]:
    sims = http.get("/api/v2/simulation?limit=1000")
    templates = http.get("/api/v2/simulation_template")
    events = http.get(f"/api/v2/simulation/{sim}/events?limit=1000")
    assert sims.status_code == templates.status_code == events.status_code == 200
    return (sims.json()["meta"]["total_count"], len(templates.json()["objects"]),
            len(events.json()["objects"]))


@pytest.mark.parametrize("text", ['"\\ud800"', '"\\udbff"', '"a\\udc00b"', '"\\ude00\\ud83d"'])
def test_a_lone_surrogate_is_refused_on_every_route(server: Server, text: str) -> None:
    """Values and keys holding a lone surrogate get 400 invalid_json and change nothing."""
    user = server.create_user()
    sim = server.create_simulation(user, {"keep": 1})
    event = json.dumps(example_event("vehicle_use", sim))
    bodies = [
        ("POST", "/api/v2/simulation", f'{{"name":"s","data":{{"x":{text}}}}}'),
        ("POST", "/api/v2/simulation", f'{{"name":{text}}}'),
        ("PATCH", f"/api/v2/simulation/{sim}", f'{{"data":{{{text}:1}}}}'),
        ("PATCH", f"/api/v2/simulation/{sim}", f'{{"name":{text}}}'),
        ("POST", "/api/v2/simulation_template", f'{{"name":"t","data":{{"x":{text}}}}}'),
        ("POST", f"/api/v2/simulation/{sim}/events", event[:-1] + f',"extra":{text}}}'),
        ("POST", f"/api/v2/simulation/{sim}/events", f"[{event[:-1]},{text}:2}}]"),
    ]
    with server.client(user, headers=JSON) as http:
        before = _counts(http, sim)
        for method, url, body in bodies:
            response = http.request(method, url, content=body)
            assert response.status_code == 400, (method, url, response.text)
            error = response.json()["error"]
            assert error["code"] == "invalid_json", error
            assert "surrogate" in error["message"], error
        assert _counts(http, sim) == before
        assert http.get(f"/api/v2/simulation/{sim}").json()["data"] == {"keep": 1}


def test_astral_characters_and_valid_pairs_are_kept(server: Server) -> None:
    """A surrogate pair escape is one astral character, stored and shown exactly."""
    user = server.create_user()
    with server.client(user, headers=JSON) as http:
        created = http.post("/api/v2/simulation",
                            content='{"name":"\\ud83d\\ude97","data":{"\\ud834\\udd1e":"😀"}}')
        assert created.status_code == 201, created.text
        shown = http.get(f"/api/v2/simulation/{created.json()['id']}").json()
        assert shown["name"] == "\U0001f697"
        assert shown["data"] == {"\U0001d11e": "😀"}


@pytest.mark.parametrize("number", ["99999999999999999999", "18446744073709551616",
                                    "-9223372036854775809", "1" + "0" * 40])
def test_integers_beyond_64_bits_are_refused_alike_on_every_route(
    server: Server, number: str
) -> None:
    """An ingest envelope's extra field is refused like simulation data, by its path
    (orjson alone would store 99999999999999999999 as 1e+20)."""
    user = server.create_user()
    sim = server.create_simulation(user)
    event = json.dumps(example_event("vehicle_use", sim))
    cases = [
        ("POST", "/api/v2/simulation", f'{{"name":"s","data":{{"n":{number}}}}}', "body.data.n"),
        ("PATCH", f"/api/v2/simulation/{sim}", f'{{"data":{{"n":[{number}]}}}}',
         "body.data.n[0]"),
        ("POST", "/api/v2/simulation_template", f'{{"name":"t","data":{{"n":{number}}}}}',
         "body.data.n"),
        ("POST", f"/api/v2/simulation/{sim}/events", event[:-1] + f',"extra":{number}}}',
         "body.extra"),
        ("POST", f"/api/v2/simulation/{sim}/events", f'[{event[:-1]},"extra":{{"a":{number}}}}}]',
         "body[0].extra.a"),
    ]
    with server.client(user, headers=JSON) as http:
        before = _counts(http, sim)
        for method, url, body, field in cases:
            response = http.request(method, url, content=body)
            assert response.status_code == 400, (method, url, response.text)
            error = response.json()["error"]
            assert error["code"] == "json_limit_exceeded", error
            assert error["details"][0]["field"] == field, error
        assert _counts(http, sim) == before


def test_large_float_literals_stay_floats(server: Server) -> None:
    """A float literal of 2**63 or more is a float, accepted on every route."""
    user = server.create_user()
    sim = server.create_simulation(user)
    event = json.dumps(example_event("vehicle_use", sim))
    with server.client(user, headers=JSON) as http:
        created = http.post("/api/v2/simulation", content='{"name":"s","data":{"f":1e20}}')
        assert created.status_code == 201, created.text
        assert created.json()["data"] == {"f": 1e20}
        stored = http.post(f"/api/v2/simulation/{sim}/events",
                           content=event[:-1] + ',"extra":-1.5e300}')
        assert stored.status_code == 201, stored.text
        page = http.get(f"/api/v2/simulation/{sim}/events").json()["objects"]
        assert page[-1]["extra"] == -1.5e300


def _write_row(server: Server, sql: str, *args: object) -> None:
    path = server.database_url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        db.execute(sql, args)


def test_a_bad_row_in_the_store_never_takes_a_listing_down(server: Server) -> None:
    """Rows holding lone surrogates and a 70-digit integer, written straight into the store,
    are shown with U+FFFD (the rest exactly) to members and admins, in lists and alone."""
    user = server.create_user()
    member = server.create_user(user.org)
    admin = server.create_user(admin=True)
    sim = server.create_simulation(user)
    good = server.create_simulation(user, {"fine": True})
    with server.client(user) as http:
        tpl = http.post("/api/v2/simulation_template", json={"name": "t", "data": {}}).json()["id"]
    bad = '{"\\udbff": ["a\\ud800b", ' + "9" * 70 + "]}"
    _write_row(server, "UPDATE simulations SET data = ?, name = ? WHERE id = ?",
               bad, "n\udc80".encode("utf-8", "surrogatepass").decode("utf-8", "replace"), sim)
    _write_row(server, "UPDATE simulation_templates SET data = ? WHERE id = ?", bad, tpl)
    expected = {"\ufffd": ["a\ufffdb", int("9" * 70)]}
    for who in (user, member, admin):
        with server.client(who) as http:
            listing = http.get("/api/v2/simulation?limit=1000")
            assert listing.status_code == 200, listing.text
            by_id = {row["id"]: row for row in listing.json()["objects"]}
            assert by_id[sim]["data"] == expected
            assert by_id[good]["data"] == {"fine": True}
            one = http.get(f"/api/v2/simulation/{sim}")
            assert one.status_code == 200 and one.json()["data"] == expected
            templates = http.get("/api/v2/simulation_template")
            assert templates.status_code == 200, templates.text
            assert {t["id"]: t for t in templates.json()["objects"]}[tpl]["data"] == expected
            assert http.get(f"/api/v2/simulation_template/{tpl}").json()["data"] == expected
