"""The failed-authentication throttle: pure rules, then against a real server, with clients
on distinct loopback addresses (127.0.0.2, 127.0.0.3: every 127/8 address is this host)."""

from __future__ import annotations

from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from ridecast.auth.throttle import FailureThrottle, LoginThrottle
from tests.conftest import Server


def _from(srv: Server, address: str, **kwargs: Any) -> httpx.Client:
    """A client whose connections come from ``address``."""
    return httpx.Client(base_url=srv.base_url, timeout=30,
                        transport=httpx.HTTPTransport(local_address=address), **kwargs)


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


@given(st.lists(st.tuples(st.sampled_from(["ada", "bob", None]),
                         st.sampled_from(["10.0.0.1", "10.0.0.2", None])), max_size=60),
       st.sampled_from(["ada", "bob"]), st.sampled_from(["10.0.0.1", "10.0.0.2"]))
def test_failures_never_throttle_a_user_from_an_address_nobody_failed_from(
    failures: list[tuple[str | None, str | None]], user: str, address: str,
) -> None:
    """Whatever failed elsewhere, a (user, address) is throttled only by failures of that
    pair or from that address: never by the user name's failures from other addresses."""
    throttle = LoginThrottle(FailureThrottle(3, 60), FailureThrottle(5, 60))
    for who, where in failures:
        throttle.failed(who, where, 0.0)
    from_here = [f for f in failures if f[1] == address]
    of_pair = [f for f in from_here if f[0] == user]
    expected = len(of_pair) >= 3 or len(from_here) >= 5
    assert (throttle.retry_after(user, address, 1.0) is not None) == expected


def test_a_stranger_cannot_lock_a_user_out(start_server: Any) -> None:
    """Wrong keys for a user from one address throttle that pair (429, even with the right
    key: guessing stays slow); the user's correct key from another address is 200."""
    srv: Server = start_server({"RIDECAST_AUTH_FAILURES_PER_USER": "5"})
    victim = srv.create_user()
    with _from(srv, "127.0.0.2") as stranger:
        statuses = [stranger.get("/api/v2/user/token/", auth=(victim.name, f"x{i}"))
                    .status_code for i in range(8)]
        assert statuses == [401] * 5 + [429] * 3
        assert stranger.get("/api/v2/simulation", auth=victim.auth).status_code == 429
    with _from(srv, "127.0.0.3") as own:
        assert own.get("/api/v2/user/token/", auth=victim.auth).status_code == 200
        assert own.get("/api/v2/simulation", auth=victim.auth).status_code == 200


def test_forwarded_for_is_believed_only_from_a_named_proxy(start_server: Any) -> None:
    """By default X-Forwarded-For is ignored: a client rotating it is still one address and
    is throttled. From a proxy named in RIDECAST_TRUSTED_PROXIES, each forwarded address
    is counted on its own."""
    guesses = [{"X-Forwarded-For": f"198.51.100.{i}"} for i in range(6)]
    plain: Server = start_server({"RIDECAST_AUTH_FAILURES_PER_ADDRESS": "4"})
    with httpx.Client(base_url=plain.base_url) as http:
        statuses = [http.get("/api/v2/user/token/", auth=(f"g{i}", "no"), headers=h)
                    .status_code for i, h in enumerate(guesses)]
    assert statuses == [401] * 4 + [429] * 2
    proxied: Server = start_server({"RIDECAST_AUTH_FAILURES_PER_ADDRESS": "4",
                                    "RIDECAST_TRUSTED_PROXIES": '["127.0.0.1"]'})
    with httpx.Client(base_url=proxied.base_url) as http:
        statuses = [http.get("/api/v2/user/token/", auth=(f"g{i}", "no"), headers=h)
                    .status_code for i, h in enumerate(guesses)]
        assert statuses == [401] * 6
        # One forwarded address failing on is throttled.
        again = [http.get("/api/v2/user/token/", auth=(f"h{i}", "no"),
                          headers=guesses[0]).status_code for i in range(4)]
    assert again == [401] * 3 + [429]


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
