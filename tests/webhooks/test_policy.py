"""The delivery policy's arithmetic (pure): a send starts only while its lease outlasts
it, the settings refuse a lease that no send could fit in, and the backlog gauges take a
bounded share of the time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from ridecast.config import Settings
from ridecast.webhooks.policy import DeliveryPolicy


def test_a_lease_no_longer_than_the_timeout_is_refused_by_name() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(webhook_lease_s=10, webhook_timeout_s=10)
    message = str(caught.value)
    assert "RIDECAST_WEBHOOK_LEASE_S (10.0)" in message
    assert "RIDECAST_WEBHOOK_TIMEOUT_S (10.0)" in message


@given(timeout=st.floats(0.01, 1000), extra=st.floats(0.01, 10.0))
def test_a_renewed_lease_always_leaves_room_for_a_send(timeout: float, extra: float) -> None:
    """Whatever the lease and time-out the settings accept: a send needs more than its
    time-out, a unit renews before it has less than that, and a fresh lease has more than
    the unit renews at (so renewing never loops, and the check at the write passes after a
    renewal unless the worker stalls)."""
    policy = DeliveryPolicy.from_settings(
        Settings(webhook_timeout_s=timeout, webhook_lease_s=timeout * (1 + extra)))
    assert policy.timeout_s < policy.send_lease_s < policy.renew_at_s < policy.lease_s


def test_the_defaults() -> None:
    policy = DeliveryPolicy.from_settings(Settings())
    assert (policy.timeout_s, policy.lease_s) == (10.0, 60.0)
    assert (policy.send_lease_s, policy.renew_at_s) == (20.0, 30.0)


@given(interval=st.floats(0.01, 3600), read=st.floats(0, 3600))
def test_the_backlog_gauges_take_a_bounded_share_of_the_time(interval: float,
                                                             read: float) -> None:
    """However long the read of the backlog took (it reads every delivery still to send, so
    it grows with a receiver's outage), the next one waits the interval at least, and long
    enough that the reads take no more than ``maintenance_share`` of the time."""
    policy = DeliveryPolicy.from_settings(Settings(webhook_maintenance_interval_s=interval))
    wait = policy.maintenance_wait_s(read)
    assert wait >= interval
    assert read <= policy.maintenance_share * wait * (1 + 1e-9)
    assert policy.maintenance_wait_s(0.0) == interval
