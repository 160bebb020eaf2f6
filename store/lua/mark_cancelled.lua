-- Set a response's cancel mark once. It may come before the projector has stored the
-- response's first event; append leaves it in place.
-- KEYS: meta, sse, input_order, input_items. ARGV: ttl.
-- Returns 1 when this call set it, 0 when it was set already or the response is deleted.
if redis.call('HEXISTS', KEYS[1], 'deleted') == 1 then
  return 0
end
local set = redis.call('HSETNX', KEYS[1], 'cancelled', 1)
refresh(KEYS, tonumber(ARGV[1]))
return set
