"""The bodies kept for first attempts (pure): bounded in bytes, oldest out first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ridecast.webhooks.bodies import Bodies


@given(st.lists(st.tuples(st.integers(1, 50), st.binary(max_size=300)), max_size=60),
       st.integers(0, 1000))
def test_bodies_never_hold_more_than_their_byte_budget(added: list[tuple[int, bytes]],
                                                       limit: int) -> None:
    """Whatever is added, the bytes held stay within the limit and are counted exactly;
    the newest body that fits is kept."""
    bodies = Bodies(limit)
    for event_id, body in added:
        bodies.add(event_id, body)
        assert bodies.size == sum(map(len, bodies.mapping.values())) <= limit
        if len(body) <= limit:
            assert event_id in bodies.mapping


def test_a_body_taken_for_a_send_is_dropped() -> None:
    """``drop`` frees its bytes; a body larger than the whole budget is not kept at all."""
    bodies = Bodies(10)
    bodies.add(1, b"12345")
    bodies.add(2, b"12345678901")
    assert list(bodies.mapping) == [1] and bodies.size == 5
    bodies.drop(1)
    assert bodies.size == 0 and len(bodies) == 0
