-- Apply one event of a response's log if its seq is the next one expected.
-- KEYS: meta, events, sse, input_order, input_items (store/redis_keys.py)
-- ARGV: seq, ttl, raw event, status, response JSON ('' keeps the snapshot), owner ('' none),
--       notify channel, sequence_number of the first SSE event, SSE event count n,
--       n SSE events (JSON), then input item id/JSON pairs.
-- Returns {1, next seq} applied, {0, expected} seq already applied, {-1, expected} a gap,
-- {-2, 0} a deleted response, {-3, stored SSE count} SSE numbering does not continue.
local meta, events, sse = KEYS[1], KEYS[2], KEYS[3]
local seq, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])

if redis.call('HEXISTS', meta, 'deleted') == 1 then
  return {-2, 0}
end
local expected = tonumber(redis.call('HGET', meta, 'next_seq') or '0')
if seq < expected then
  return {0, expected}
end
if seq > expected then
  return {-1, expected}
end
local n_sse = tonumber(ARGV[9])
local sse_count = redis.call('LLEN', sse)
if n_sse > 0 and sse_count ~= tonumber(ARGV[8]) then
  return {-3, sse_count}
end

-- The raw event lands at list index seq: only the next seq is ever appended.
redis.call('RPUSH', events, ARGV[3])
if n_sse > 0 then
  redis.call('RPUSH', sse, unpack(ARGV, 10, 9 + n_sse))
end
redis.call('HSET', meta, 'next_seq', seq + 1, 'status', ARGV[4])
if ARGV[5] ~= '' then
  redis.call('HSET', meta, 'response', ARGV[5])
end
if ARGV[6] ~= '' then
  redis.call('HSETNX', meta, 'owner', ARGV[6])
end
local first_item = 10 + n_sse
if #ARGV >= first_item then
  local position = tonumber(redis.call('HGET', meta, 'input_next') or '0')
  position = add_items(KEYS[4], KEYS[5], ARGV, first_item, position)
  redis.call('HSET', meta, 'input_next', position)
end
refresh(KEYS, ttl)
if n_sse > 0 then
  -- Readers waiting on the response re-read the list; the number is only a hint.
  redis.call('PUBLISH', ARGV[7], sse_count + n_sse - 1)
end
return {1, seq + 1}
