"""One bad row fails only its own request (issue 50), on SQLite and on PostgreSQL.

The store is made to refuse certain rows by a real trigger added to the test's database,
as a constraint or a value the store cannot keep would: an event whose body holds a
marker, and the recorded result of one simulation's deliveries. Requests and results of
another organisation, committed in the same group or batch, must not notice.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ridecast.cli.receiver import ReceiverThread
from tests.conftest import Server, server_per_store, store_execute
from tests.webhooks.conftest import FAST_ENV
from tests.webhooks.helpers import Recorder, deliveries, post_events, vehicle_use, wait_for

server = server_per_store("badrow", env=FAST_ENV)

MARKER = "refuse-this-row"


def _refuse_events(srv: Server) -> None:
    """A trigger that refuses every event whose body holds ``MARKER``."""
    if srv.database_url.startswith("sqlite"):
        store_execute(srv, f"""
            CREATE TRIGGER refuse_marked BEFORE INSERT ON events
            WHEN instr(CAST(NEW.body AS TEXT), '{MARKER}') > 0
            BEGIN SELECT RAISE(ABORT, 'refused by the test'); END""")
        return
    store_execute(srv, f"""
        CREATE FUNCTION refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF position('{MARKER}'::bytea IN NEW.body) > 0 THEN
                RAISE EXCEPTION 'refused by the test';
            END IF;
            RETURN NEW;
        END $$""", """
        CREATE TRIGGER refuse_marked BEFORE INSERT ON events
        FOR EACH ROW EXECUTE FUNCTION refuse_marked()""")


def _refuse_results(srv: Server, sim: int) -> None:
    """A trigger that refuses every recorded outcome of ``sim``'s deliveries (a claim,
    which sets ``delivering``, is let through: the deliveries are sent)."""
    if srv.database_url.startswith("sqlite"):
        store_execute(srv, f"""
            CREATE TRIGGER refuse_results BEFORE UPDATE ON webhook_deliveries
            WHEN NEW.simulation_id = {sim} AND NEW.status <> 'delivering'
            BEGIN SELECT RAISE(ABORT, 'refused by the test'); END""")
        return
    store_execute(srv, f"""
        CREATE FUNCTION refuse_results() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.simulation_id = {sim} AND NEW.status <> 'delivering' THEN
                RAISE EXCEPTION 'refused by the test';
            END IF;
            RETURN NEW;
        END $$""", """
        CREATE TRIGGER refuse_results BEFORE UPDATE ON webhook_deliveries
        FOR EACH ROW EXECUTE FUNCTION refuse_results()""")


def _post_many(srv: Server, auth: tuple[str, str], sim: int, count: int,
               marked: bool) -> list[httpx.Response]:
    with httpx.Client(base_url=srv.base_url, auth=auth, timeout=60) as http:
        out = []
        for n in range(count):
            event = vehicle_use(n) | {"simulation_id": sim}
            if marked:
                event["note"] = MARKER
            out.append(http.post(f"/api/v2/simulation/{sim}/events", json=event))
        return out


def test_a_refused_event_fails_only_its_own_request(server: Server) -> None:
    """Requests of one organisation whose events the store refuses, posted at the same time
    as another organisation's: those get 500 store_refused, every other one 201, and the
    other organisation's history holds all of its events."""
    _refuse_events(server)
    victim, attacker = server.create_user(), server.create_user()
    good = server.create_simulation(victim)
    bad = server.create_simulation(attacker)
    per_thread = 40
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(_post_many, server, victim.auth, good, per_thread, False)
                   for _ in range(5)]
        futures += [pool.submit(_post_many, server, attacker.auth, bad, per_thread, True)
                    for _ in range(3)]
        answers = [f.result(timeout=300) for f in futures]
    fair = [r for batch in answers[:5] for r in batch]
    refused = [r for batch in answers[5:] for r in batch]
    assert {r.status_code for r in fair} == {201}, {r.text for r in fair if r.status_code != 201}
    assert {r.status_code for r in refused} == {500}
    assert {r.json()["error"]["code"] for r in refused} == {"store_refused"}
    with server.client(victim) as http:
        stored = http.get(f"/api/v2/simulation/{good}/events", params={"limit": 1000}).json()
    assert len(stored["objects"]) == 5 * per_thread
    with server.client(attacker) as http:
        assert http.get(f"/api/v2/simulation/{bad}/events").json()["objects"] == []


def test_a_refused_result_fails_only_its_own_delivery(server: Server) -> None:
    """One simulation's delivery results refused by the store: another organisation's
    deliveries, sent and recorded meanwhile, are all recorded as succeeded."""
    receiving = Recorder()
    victim, attacker = server.create_user(), server.create_user()
    with ReceiverThread(receiving) as receiver:
        hook: dict[str, Any] = {"messaging_webhook_url": receiver.url,
                                "messaging_webhook_message_types": ["vehicle_use"]}
        bad = server.create_simulation(attacker, hook)
        good = server.create_simulation(victim, hook)
        _refuse_results(server, bad)
        with server.client(attacker) as a, server.client(victim) as v:
            post_events(a, bad, [vehicle_use(n) for n in range(5)])
            # The refused results are sent first: they are in every batch from then on.
            wait_for(lambda: len(receiving.requests) >= 5, timeout=60)
            for n in range(20):
                post_events(v, good, [vehicle_use(n)])

            def all_recorded() -> bool:
                return sum(d["status"] == "succeeded" for d in deliveries(v, good)) == 20

            wait_for(all_recorded, timeout=60, why=lambda: server.logs()[-3000:])
            assert all(d["status"] != "succeeded" for d in deliveries(a, bad))
    assert "refused the result of webhook delivery" in server.logs()
