"""The Redis keys and Lua scripts of the cluster's limits (each script runs atomically).

Every key starts with ``<RIDECAST_BUS_PREFIX>:limits:``. User names and addresses are
hashed into keys, so a key's length is bounded whatever a client sends. The scripts reach
only keys named in ``KEYS``, except ``STREAM_OPEN``, which tests the node leases of the
nodes it finds (a single Redis, not Redis Cluster).
"""

from __future__ import annotations

import hashlib


def digest(value: str) -> str:
    """A short, fixed-length name for a user name or an address in a key."""
    return hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


class Keys:
    """The key names under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.base = f"{prefix}:limits:"

    def failures_of_pair(self, user: str, address: str | None) -> str:
        return f"{self.base}fail:pair:{digest(user + chr(0) + (address or ''))}"

    def failures_of_address(self, address: str) -> str:
        return f"{self.base}fail:addr:{digest(address)}"

    def rate(self, key: str) -> str:
        return f"{self.base}rate:{digest(key)}"

    def user_streams(self, user_id: int) -> str:
        return f"{self.base}streams:user:{user_id}"

    def token_streams(self, token_hash: str) -> str:
        return f"{self.base}streams:token:{token_hash}"

    def quota_lock(self, name: str) -> str:
        return f"{self.base}quota:lock:{name}"

    def quota_events(self, org_id: int) -> str:
        return f"{self.base}quota:events:{org_id}"

    def quota_bytes(self, org_id: int) -> str:
        return f"{self.base}quota:bytes:{org_id}"

    @property
    def node_prefix(self) -> str:
        return f"{self.base}node:"

    def node(self, node_id: str) -> str:
        return self.node_prefix + node_id


LOGIN_WAIT = """
-- KEYS: failure counters; ARGV: the limit of each. Returns ms to wait (0: not throttled).
local wait = 0
for i, key in ipairs(KEYS) do
  local count = tonumber(redis.call('GET', key) or '0')
  if count >= tonumber(ARGV[i]) then
    local ttl = redis.call('PTTL', key)
    if ttl > wait then wait = ttl end
  end
end
return wait
"""

LOGIN_FAILED = """
-- KEYS: failure counters; ARGV[1]: the window in ms. A fixed window per key.
for _, key in ipairs(KEYS) do
  if redis.call('INCR', key) == 1 then redis.call('PEXPIRE', key, ARGV[1]) end
end
return 1
"""

RATE_TAKE = """
-- A token bucket on Redis's clock. KEYS[1]: the bucket; ARGV: rate, burst, tokens wanted.
-- Returns {tokens granted, seconds to wait as a string} (granted 0 when the bucket is dry).
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local last = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - last) * rate)
local granted = math.min(want, math.floor(tokens))
local wait = 0
if granted < 1 then
  granted = 0
  wait = (1 - tokens) / rate
end
tokens = tokens - granted
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {granted, tostring(wait)}
"""

STREAM_OPEN = """
-- KEYS: the user's and the token's stream counts (hashes: node id -> open streams).
-- ARGV: this node's id, the user's limit, the token's limit, the node lease key prefix,
-- the keys' time to live in ms. Counts of nodes whose lease ran out are dropped; a key
-- expires when no live node renews it (the counts of a dead node that nobody reads again
-- do not stay in Redis for ever). Returns 0 (counted) or the index of the key at its limit.
local node, prefix = ARGV[1], ARGV[4]
for i, key in ipairs(KEYS) do
  local counts = redis.call('HGETALL', key)
  local total = 0
  for j = 1, #counts, 2 do
    local owner = counts[j]
    if owner == node or redis.call('EXISTS', prefix .. owner) == 1 then
      total = total + tonumber(counts[j + 1])
    else
      redis.call('HDEL', key, owner)
    end
  end
  if total >= tonumber(ARGV[i + 1]) then return i end
end
for _, key in ipairs(KEYS) do
  redis.call('HINCRBY', key, node, 1)
  redis.call('PEXPIRE', key, ARGV[5])
end
return 0
"""

STREAM_CLOSE = """
-- KEYS: the user's and the token's stream counts; ARGV[1]: this node's id.
for _, key in ipairs(KEYS) do
  if redis.call('HINCRBY', key, ARGV[1], -1) <= 0 then redis.call('HDEL', key, ARGV[1]) end
end
return 1
"""

NODE_LEASE = """
-- KEYS[1]: this node's lease; ARGV[1]: its length in ms. Returns 1 when it was still held
-- (0: it ran out, so other nodes may have dropped this node's counts: publish them again).
local held = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return held
"""

UNLOCK = """
-- KEYS[1]: a lock; ARGV[1]: the holder's token. Deleted only by its holder (a lock that ran
-- out and was taken by another node is not released by the first).
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
