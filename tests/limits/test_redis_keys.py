"""The stream counts on Redis stay as large as the open streams: a dead node's counts
expire even when nobody opens a stream under the same key again, a live node's counts do
not, and a node forgets the keys of streams it closed."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from ridecast.config import Settings
from ridecast.limits.memory import MemoryLimits
from ridecast.limits.redis import RedisLimits
from tests.conftest import REDIS_URL, redis_answers, service_missing
from tests.waiting import eventually_async

LEASE_S = 0.5


@pytest.fixture
def settings() -> Settings:
    if not redis_answers():
        service_missing(f"no Redis at {REDIS_URL}")
    return Settings(bus_url=REDIS_URL, bus_prefix=f"test-{uuid.uuid4().hex[:12]}",
                    limits_lease_s=LEASE_S)


def _node(settings: Settings) -> RedisLimits:
    return RedisLimits(settings, MemoryLimits(settings))


async def test_a_dead_nodes_counts_expire_and_a_live_nodes_stay(settings: Settings) -> None:
    """A node that dies without giving its counts back leaves keys that expire within
    three leases; the keys of a node that keeps renewing outlive them."""
    dead, alive = _node(settings), _node(settings)
    await dead.start()
    await alive.start()
    probe = aioredis.Redis.from_url(REDIS_URL)
    keys = dead._keys  # the key names are the same on every node
    try:
        assert await dead.open_stream(1, "token-of-the-dead")
        assert await alive.open_stream(2, "token-of-the-living")
        dead_keys = [keys.user_streams(1), keys.token_streams("token-of-the-dead")]
        ttl = await probe.pttl(dead_keys[0])
        assert 0 < ttl <= 3 * LEASE_S * 1000

        # The dead node stops renewing and never says goodbye (a SIGKILL).
        assert dead._renewer is not None
        dead._renewer.cancel()

        async def dead_gone() -> bool:
            return not await probe.exists(*dead_keys)

        await eventually_async(dead_gone, what="the dead node's keys to expire")
        assert await probe.hget(keys.user_streams(2), alive.node_id) == b"1"
        assert await probe.hget(keys.token_streams("token-of-the-living"),
                                alive.node_id) == b"1"
    finally:
        await alive.close()
        await dead._redis.aclose()
        await probe.aclose()


async def test_a_node_forgets_the_keys_of_streams_it_closed(settings: Settings) -> None:
    """After its streams close, a node remembers no key of theirs, and Redis holds none."""
    node = _node(settings)
    await node.start()
    probe = aioredis.Redis.from_url(REDIS_URL)
    try:
        for n in range(20):
            assert await node.open_stream(n, f"token-{n}")
            node.close_stream(n, f"token-{n}")

        async def closed() -> bool:
            return not node._tasks

        await eventually_async(closed, what="the closes to reach Redis")
        assert node._published == set()
        assert await probe.keys(f"{settings.bus_prefix}:limits:streams:*") == []
    finally:
        await node.close()
        await probe.aclose()
