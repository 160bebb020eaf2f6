"""Background responses per owner that have not ended, counted in Redis so that every
API replica enforces one bound (SPATE_KEY_MAX_BACKGROUND) together.

A slot is a member of the owner's sorted set, scored by when it was taken: the API takes
it before publishing a background request, the projection gives it back when the
response's terminal event is stored. A slot whose end never reaches the store (its log
expired, the store was wiped) is dropped once it is older than the horizon, so a lost
end cannot hold a key's bound forever.
"""

from __future__ import annotations

import time

from store.redis_client import RedisClient
from store.redis_keys import PREFIX
from store.redis_scripts import translated_errors

# KEYS: the owner's set. ARGV: now, horizon (s), limit, response id.
# Returns 1 when the slot is held (taken now or before), 0 when the owner is at its limit.
_TAKE = """
local now, horizon = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then
  return 1
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('EXPIRE', KEYS[1], horizon)
return 1
"""

def slots_key(owner: str | None) -> str:
    """Sorted set: an owner's background responses not yet ended, scored by start time
    (None: an event from before owners were set, counted as the shared owner)."""
    return f"{PREFIX}:background:{{{owner or 'shared'}}}"


class BackgroundSlots:
    def __init__(self, redis: RedisClient, horizon_s: int) -> None:
        self._redis = redis
        self.horizon_s = horizon_s
        self._take = redis.register_script(_TAKE)

    async def take(self, owner: str | None, response_id: str, limit: int) -> bool:
        """Hold a slot for `response_id`; False when `owner` holds `limit` already."""
        with translated_errors():
            held = await self._take(
                keys=[slots_key(owner)], args=[time.time(), self.horizon_s, limit, response_id]
            )
        return bool(held)

    async def give_back(self, owner: str | None, response_id: str) -> None:
        """Free the slot (once the response has ended, or was never published)."""
        with translated_errors():
            await self._redis.zrem(slots_key(owner), response_id)

    async def held(self, owner: str | None) -> int:
        with translated_errors():
            return int(await self._redis.zcard(slots_key(owner)))
