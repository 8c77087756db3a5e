"""Nothing is lost: a receiver that is down, and a server killed with SIGKILL mid-burst."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

import httpx

from ridecast.cli.receiver import ReceiverThread, Reply
from tests.conftest import Server, free_port

from .helpers import Recorder, deliveries, post_events, vehicle_use, wait_for

ENV = {
    "RIDECAST_WEBHOOK_RETRY_SCHEDULE_S": "[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5,"
                                         " 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]",
    "RIDECAST_WEBHOOK_LEASE_S": "1",
    "RIDECAST_WEBHOOK_TIMEOUT_S": "0.5",  # a lease outlasts a request's time-out
}
BURST_MAX = 4000  # events the killed burst posts at most (50 per request, 5,000/s at most)


def test_receiver_down_during_1000_events_gets_all_after(
    start_server: Callable[..., Server],
) -> None:
    """1,000 events published while the receiver is down all arrive once it is back."""
    server = start_server(ENV)
    port = free_port()
    user = server.create_user()
    sim = server.create_simulation(user, {
        "messaging_webhook_url": f"http://127.0.0.1:{port}/in",
        "messaging_webhook_message_types": ["vehicle_use"],
    })
    with server.client(user) as http:
        ids = []
        for start in range(0, 1000, 250):
            ids += post_events(http, sim, [vehicle_use(i) for i in range(start, start + 250)])
        # The oldest delivery has failed at least once against the closed port (in ordered
        # mode the others wait behind it), and none succeeded.
        def failing() -> bool:
            log = deliveries(http, sim)
            return (len(log) == 1000 and log[-1]["attempt_count"] > 0
                    and all(d["status"] != "succeeded" for d in log))

        wait_for(failing)
    recorder = Recorder()
    with ReceiverThread(recorder, port=port):
        wait_for(lambda: len(recorder.ids()) == 1000, timeout=60)
    assert recorder.ids() == {f"msg_{i}" for i in ids}


def test_sigkill_mid_burst_then_restart_delivers_every_event(
    start_server: Callable[..., Server],
) -> None:
    """After kill -9 during a burst and a restart on the same DB, every event arrived."""
    recorder = Recorder(lambda req, n: Reply(204, delay_s=0.005))
    with ReceiverThread(recorder) as receiver:
        first = start_server(ENV)
        user = first.create_user()
        sim = first.create_simulation(user, {
            "messaging_webhook_url": receiver.url,
            "messaging_webhook_message_types": ["vehicle_use"],
        })
        acked: list[str] = []
        stop = threading.Event()

        def burst() -> None:
            # Paced and capped: the receiver takes 200 ordered deliveries/s, and an unpaced
            # burst acked 17,200 events on a fast machine before the kill, more than the
            # restarted server could deliver within the wait below.
            with httpx.Client(base_url=first.base_url, auth=user.auth, timeout=5) as http:
                i = 0
                while not stop.wait(0.01) and i < BURST_MAX:
                    try:
                        acked.extend(post_events(http, sim, [vehicle_use(i + k)
                                                             for k in range(50)]))
                    except Exception:
                        return  # the server died under us: what was acked must arrive
                    i += 50

        thread = threading.Thread(target=burst)
        thread.start()
        wait_for(lambda: len(acked) >= 1500 and len(recorder.requests) > 100)
        first.stop(signal.SIGKILL)
        stop.set()
        thread.join(10)
        assert len(recorder.ids()) < len(acked)  # killed with deliveries outstanding
        start_server(ENV, database_url=first.database_url)
        wait_for(lambda: {f"msg_{i}" for i in acked} <= recorder.ids(), timeout=60)
