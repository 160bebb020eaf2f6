-- Create a conversation with its first items, unless one with that id exists.
-- KEYS: meta, order, items. ARGV: ttl, created_at, metadata JSON, owner ('' none),
-- then item id/JSON pairs.
-- Returns {1, created_at, metadata} created, {0, created_at, metadata} already there.
local existing = redis.call('HMGET', KEYS[1], 'created_at', 'metadata')
if existing[1] then
  return {0, existing[1], existing[2]}
end
redis.call('HSET', KEYS[1], 'created_at', ARGV[2], 'metadata', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'owner', ARGV[4])
end
local position = add_items(KEYS[2], KEYS[3], ARGV, 5, 0)
redis.call('HSET', KEYS[1], 'next_position', position)
refresh(KEYS, tonumber(ARGV[1]))
return {1, ARGV[2], ARGV[3]}
