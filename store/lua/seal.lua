-- Seal an ended response: its SSE events, one list entry each while it streamed, become
-- one packed value in the hash (raw deflate of the events joined by newlines, with the
-- stored Response JSON as the preset dictionary: the events repeat its text), a fraction
-- of the list's size. Only when the list still holds exactly the events that were
-- packed and the snapshot is the dictionary they were packed with; append.lua never
-- changes the snapshot of a sealed response.
-- KEYS: meta, sse, input_order, input_items.
-- ARGV: packed events, their count, ttl, the Response JSON they were packed against.
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
redis.call('HSET', KEYS[1], 'sse_packed', ARGV[1], 'sse_count', ARGV[2])
redis.call('DEL', KEYS[2])
refresh(KEYS, tonumber(ARGV[3]))
return 1
