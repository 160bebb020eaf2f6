-- Seal an ended response: its SSE events, one list entry each while it streamed, become
-- one packed value in the hash (zlib of the events joined by newlines), a fraction of
-- the list's size. Only when the list still holds exactly the events that were packed.
-- KEYS: meta, sse, input_order, input_items. ARGV: packed events, their count, ttl.
-- Returns 1 when sealed, 0 when the list changed or the response is gone.
if redis.call('HEXISTS', KEYS[1], 'next_seq') == 0 then
  return 0
end
if redis.call('LLEN', KEYS[2]) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'sse_packed', ARGV[1], 'sse_count', ARGV[2])
redis.call('DEL', KEYS[2])
refresh(KEYS, tonumber(ARGV[3]))
return 1
