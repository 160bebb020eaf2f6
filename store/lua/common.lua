-- Prepended to every script when it is loaded (store/redis_scripts.py).
-- Redis runs a script atomically, so each script below is one all-or-nothing step.

-- Every key of a response or conversation lives as long as its last write plus the TTL.
local function refresh(keys, ttl)
  for _, key in ipairs(keys) do
    redis.call('EXPIRE', key, ttl)
  end
end

-- An item list is a sorted set (id -> position) and a hash (id -> JSON). Appends the
-- id/JSON pairs in args[first], args[first + 1], ... at `position` on, skipping ids
-- already listed (so re-adding the same items changes nothing); returns the next position.
local function add_items(order_key, items_key, args, first, position)
  for i = first, #args, 2 do
    if redis.call('ZADD', order_key, 'NX', position, args[i]) == 1 then
      redis.call('HSET', items_key, args[i], args[i + 1])
      position = position + 1
    end
  end
  return position
end
