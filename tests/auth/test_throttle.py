"""The failed-authentication throttle: pure rules, then against a real server."""

from __future__ import annotations

from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from ridecast.auth.throttle import FailureThrottle
from tests.conftest import Server


def test_a_key_is_throttled_after_max_failures_until_the_window_ends() -> None:
    """The n-th failure in a window throttles the key; the next window frees it."""
    throttle = FailureThrottle(max_failures=3, window_s=10)
    for t in (0.0, 1.0, 2.0):
        assert throttle.retry_after("ada", t) is None
        throttle.record_failure("ada", t)
    assert throttle.retry_after("ada", 3.0) == 7.0
    assert throttle.retry_after("bob", 3.0) is None
    assert throttle.retry_after("ada", 10.0) is None


@given(st.lists(st.tuples(st.sampled_from("abcde"), st.floats(0, 100)), max_size=200))
def test_memory_stays_bounded_and_waits_stay_within_the_window(
    events: list[tuple[str, float]],
) -> None:
    """Whatever the sequence, at most max_keys windows are kept and no wait exceeds one."""
    throttle = FailureThrottle(max_failures=2, window_s=5, max_keys=3)
    for key, now in sorted(events, key=lambda e: e[1]):
        throttle.record_failure(key, now)
        assert len(throttle._windows) <= 3
        wait = throttle.retry_after(key, now)
        assert wait is None or 0 < wait <= 5


def test_failures_throttle_that_name_but_not_another_user(start_server: Any) -> None:
    """A flood of bad keys for one name gets 429 + Retry-After; a valid other user gets 200."""
    srv: Server = start_server({"RIDECAST_AUTH_FAILURES_PER_USER": "5"})
    victim = srv.create_user()
    other = srv.create_user()
    with httpx.Client(base_url=srv.base_url) as http:
        statuses = [
            http.get("/api/v2/simulation", auth=(victim.name, f"wrong-{i}")).status_code
            for i in range(8)
        ]
        assert statuses[:5] == [401] * 5
        assert statuses[5:] == [429] * 3
        refused = http.get("/api/v2/simulation", auth=(victim.name, "wrong"))
        assert refused.json()["error"]["code"] == "too_many_requests"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert http.get("/api/v2/simulation", auth=other.auth).status_code == 200


def test_failures_from_one_address_throttle_that_address(start_server: Any) -> None:
    """Many names tried from one address: that address is answered 429."""
    srv: Server = start_server({"RIDECAST_AUTH_FAILURES_PER_ADDRESS": "4"})
    with httpx.Client(base_url=srv.base_url) as http:
        statuses = [
            http.get("/api/v2/user/token/", auth=(f"guess-{i}", "nope")).status_code
            for i in range(6)
        ]
    assert statuses == [401] * 4 + [429] * 2
