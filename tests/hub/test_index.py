"""Tests of the subscription index (pure): routing equals the visibility rule."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from ridecast.auth.visibility import Principal, can_see
from ridecast.hub.index import SubscriptionIndex
from ridecast.hub.paths import Route

TYPES = ["gps_data", "offers", "bookings"]


@dataclass(eq=False)
class Sub:
    principal: Principal
    route: Route
    tag: int = field(default=0)


principals = st.builds(
    Principal,
    user_id=st.integers(1, 4),
    name=st.just("u"),
    org_id=st.integers(1, 3),
    is_admin=st.booleans(),
)
routes = st.builds(
    Route,
    simulation_id=st.none() | st.integers(1, 4),
    message_type=st.none() | st.sampled_from(TYPES),
)
events = st.tuples(
    st.integers(1, 4), st.sampled_from(TYPES), st.integers(1, 3), st.integers(1, 4)
)


def expected(sub: Sub, sim: int, kind: str, org: int, owner: int) -> bool:
    # Per-simulation streams were checked for visibility when they opened.
    if sub.route.simulation_id is not None:
        return sub.route.matches(sim, kind)
    return sub.route.matches(sim, kind) and can_see(sub.principal, org_id=org, owner_id=owner)


@given(st.lists(st.tuples(principals, routes), max_size=30), st.lists(events, max_size=20))
def test_receivers_equal_a_scan_of_every_stream(
    subs: list[tuple[Principal, Route]], evs: list[tuple[int, str, int, int]]
) -> None:
    """Each event reaches exactly the streams a full scan with can_see would pick, once."""
    index: SubscriptionIndex[Sub] = SubscriptionIndex()
    members = [Sub(p, r, i) for i, (p, r) in enumerate(subs)]
    for m in members:
        index.add(m)
    assert len(index) == len(members)
    for sim, kind, org, owner in evs:
        got = list(index.receivers(sim, kind, org, owner))
        assert len(got) == len(set(map(id, got)))
        assert {m.tag for m in got} == {
            m.tag for m in members if expected(m, sim, kind, org, owner)
        }


@given(st.lists(st.tuples(principals, routes), min_size=1, max_size=20), st.data())
def test_remove_forgets(subs: list[tuple[Principal, Route]], data: st.DataObject) -> None:
    """A removed stream receives nothing more, and removing twice changes nothing."""
    index: SubscriptionIndex[Sub] = SubscriptionIndex()
    members = [Sub(p, r, i) for i, (p, r) in enumerate(subs)]
    for m in members:
        index.add(m)
    gone = data.draw(st.sampled_from(members))
    assert index.remove(gone)
    assert not index.remove(gone)
    assert len(index) == len(members) - 1
    assert gone not in index.members()
    for sim in range(1, 5):
        for kind in TYPES:
            for org in range(1, 4):
                assert gone not in list(index.receivers(sim, kind, org, 1))


def test_simulation_members() -> None:
    """simulation_members lists the streams opened on one simulation, whatever their type."""
    index: SubscriptionIndex[Sub] = SubscriptionIndex()
    p = Principal(1, "u", 1)
    a, b, c = Sub(p, Route(7, None)), Sub(p, Route(7, "offers")), Sub(p, Route(8, None))
    for m in (a, b, c):
        index.add(m)
    assert set(map(id, index.simulation_members(7))) == {id(a), id(b)}
