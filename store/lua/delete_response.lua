-- Delete a stored response and leave a tombstone, so a replay of its log (which append
-- refuses on a tombstone) cannot bring it back before the TTL ends.
-- KEYS: meta, sse, input_order, input_items. ARGV: ttl.
-- Returns 1 when a projected response was there, else 0. A response never projected
-- gets no tombstone (only a cancel mark, if any, is dropped); a tombstone stays as it is.
if redis.call('HEXISTS', KEYS[1], 'deleted') == 1 then
  return 0
end
local existed = redis.call('HEXISTS', KEYS[1], 'next_seq')
redis.call('DEL', unpack(KEYS))
if existed == 1 then
  redis.call('HSET', KEYS[1], 'deleted', 1)
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
end
return existed
