-- Seal an ended response: its Response snapshot and its SSE events (one list entry each
-- while it streamed) become one packed value in the hash, `sealed`: the snapshot and the
-- events as lines, deflated together (the events repeat the snapshot's text), a fraction
-- of what the list and the snapshot took. Only when the list still holds exactly the
-- events that were packed and the snapshot is the one packed; append.lua never writes a
-- sealed response's snapshot or events again.
-- KEYS: meta, sse, input_order, input_items.
-- ARGV: packed value, the event count, ttl, the Response JSON packed.
-- Returns 1 when sealed, 0 when the list or the snapshot changed or the response is gone.
if redis.call('HEXISTS', KEYS[1], 'next_seq') == 0 then
  return 0
end
if redis.call('LLEN', KEYS[2]) ~= tonumber(ARGV[2]) then
  return 0
end
if redis.call('HGET', KEYS[1], 'response') ~= ARGV[4] then
  return 0
end
redis.call('HSET', KEYS[1], 'sealed', ARGV[1], 'sse_count', ARGV[2])
redis.call('HDEL', KEYS[1], 'response')
redis.call('DEL', KEYS[2])
refresh(KEYS, tonumber(ARGV[3]))
return 1
