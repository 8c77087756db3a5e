"""The subscription index (pure): which streams receive an event, without scanning them all.

Every stream sits in exactly one bucket, chosen by its route and its user:

======================  =====================================  ==========================
route                   bucket key                             receives
======================  =====================================  ==========================
one simulation          ``("sim", simulation_id, type|None)``  that simulation's events
all, admin              ``("admin", type|None)``               every event
all, non-admin          ``("org", org_id, type|None)``         its organisation's events
======================  =====================================  ==========================

plus, for a non-admin "all" stream, an ``("owner", user_id, type|None)`` entry: a user
also sees simulations it owns in another organisation (docs/design.md decision 8), and that
bucket is consulted only when the event's organisation differs from the stream's, so no
stream gets an event twice.

Routing one event looks up at most eight buckets (four keys, each with the event's type
and with ``None``), so its cost is proportional to the streams that receive it. The
per-simulation bucket checks visibility once, when the stream opens; organisation buckets
are visibility by construction, which covers simulations created after the stream opened.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, Protocol, TypeVar

from ..auth.visibility import Principal
from .paths import Route


class Member(Protocol):
    """What the index needs to know of a stream."""

    @property
    def principal(self) -> Principal: ...

    @property
    def route(self) -> Route: ...


BucketKey = tuple[Hashable, ...]
M = TypeVar("M", bound=Member)


def bucket_keys(member: Member) -> list[BucketKey]:
    """The buckets a stream sits in (one, or two for a non-admin "all" stream)."""
    route, who = member.route, member.principal
    if route.simulation_id is not None:
        return [("sim", route.simulation_id, route.message_type)]
    if who.is_admin:
        return [("admin", route.message_type)]
    return [("org", who.org_id, route.message_type), ("owner", who.user_id, route.message_type)]


class SubscriptionIndex(Generic[M]):
    """Streams by bucket; ``receivers(...)`` yields those an event goes to."""

    def __init__(self) -> None:
        # dicts, not sets: iteration follows insertion, which keeps delivery order
        # across streams reproducible (and dict membership is as cheap as a set's).
        self._buckets: dict[BucketKey, dict[M, None]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, member: M) -> None:
        """Index ``member`` (a stream that is open and authorised)."""
        for key in bucket_keys(member):
            self._buckets.setdefault(key, {})[member] = None
        self._count += 1

    def remove(self, member: M) -> bool:
        """Forget ``member``; False (and no change) when it was not indexed."""
        found = False
        for key in bucket_keys(member):
            bucket = self._buckets.get(key)
            if bucket is not None and member in bucket:
                found = True
                del bucket[member]
                if not bucket:
                    del self._buckets[key]
        if found:
            self._count -= 1
        return found

    def simulation_members(self, simulation_id: int) -> list[M]:
        """Streams opened on one simulation (any type): closed when it is deleted."""
        out: list[M] = []
        for key, bucket in self._buckets.items():
            if key[0] == "sim" and key[1] == simulation_id:
                out.extend(bucket)
        return out

    def members(self) -> list[M]:
        """Every indexed stream, once."""
        seen: dict[M, None] = {}
        for bucket in self._buckets.values():
            seen.update(bucket)
        return list(seen)

    def buckets_for(
        self, simulation_id: int, message_type: str, org_id: int
    ) -> Iterator[tuple[BucketKey, dict[M, None]]]:
        """The non-empty buckets all of whose streams receive an event (not the owner
        buckets, see ``owner_receivers``). A stream sits in at most one of them."""
        buckets = self._buckets
        for key in (
            ("sim", simulation_id, message_type),
            ("sim", simulation_id, None),
            ("org", org_id, message_type),
            ("org", org_id, None),
            ("admin", message_type),
            ("admin", None),
        ):
            bucket = buckets.get(key)
            if bucket:
                yield key, bucket

    def owner_receivers(self, message_type: str, org_id: int, owner_id: int) -> Iterator[M]:
        """The streams that receive an event only as its owner's, from another organisation."""
        buckets = self._buckets
        for key in (("owner", owner_id, message_type), ("owner", owner_id, None)):
            bucket = buckets.get(key)
            if bucket:
                for member in bucket:
                    # In its own organisation the stream was served by the org bucket.
                    if member.principal.org_id != org_id:
                        yield member

    def receivers(
        self, simulation_id: int, message_type: str, org_id: int, owner_id: int
    ) -> Iterator[M]:
        """The streams an event of this simulation, type, organisation and owner goes to."""
        for _key, bucket in self.buckets_for(simulation_id, message_type, org_id):
            yield from bucket
        yield from self.owner_receivers(message_type, org_id, owner_id)
