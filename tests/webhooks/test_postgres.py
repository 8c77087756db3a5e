"""The outbox on PostgreSQL: claims with FOR UPDATE SKIP LOCKED, two dispatchers, no loss.

Skipped when no PostgreSQL answers on 127.0.0.1:5432 (CI starts one).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from ridecast.cli.receiver import ReceiverThread
from tests.conftest import Server

from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for


def test_serve_and_worker_share_the_outbox_on_postgres(
    pg_url: str, start_server: Callable[..., Server]
) -> None:
    """serve's dispatcher and a ridecast worker split 500 deliveries: each arrives, once logged."""
    recorder = Recorder()
    server = start_server(database_url=pg_url)
    with ReceiverThread(recorder) as receiver:
        user = server.create_user()
        sim = server.create_simulation(user, {
            "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": ["vehicle_use"]})
        env = {**os.environ, "RIDECAST_DATABASE_URL": pg_url,
               "RIDECAST_WEBHOOK_ALLOW_PRIVATE": "true"}
        worker = subprocess.Popen([sys.executable, "-m", "ridecast.cli.main", "worker"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with server.client(user) as http:
                ids = []
                for start in range(0, 500, 100):
                    ids += post_events(http, sim, [vehicle_use(i) for i in range(start,
                                                                                 start + 100)])
                wait_for(lambda: len(recorder.ids()) == 500, timeout=60)
                wait_for(lambda: len(deliveries(http, sim, status="succeeded")) == 500)
        finally:
            worker.terminate()
            worker.wait(15)
    assert recorder.ids() == {f"msg_{i}" for i in ids}
