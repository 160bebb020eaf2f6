-- Apply a run of events of a response's log (seqs seq .. seq + count - 1) if seq is the
-- next one expected: a batch of one response's events is one write.
-- KEYS: meta, sse, input_order, input_items (store/redis_keys.py)
-- ARGV: seq, count, ttl, status, response JSON ('' keeps the snapshot), owner ('' none),
--       notify channel, sequence_number of the first SSE event, SSE event count n,
--       n SSE events (JSON), then input item id/JSON pairs.
-- Returns {1, next seq} applied, {0, expected} every seq already applied, {-1, expected}
-- a gap or a run that overlaps the applied ones, {-2, 0} a deleted response, {-3, stored
-- SSE count} SSE numbering does not continue.
local meta, sse = KEYS[1], KEYS[2]
local seq, count, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

if redis.call('HEXISTS', meta, 'deleted') == 1 then
  return {-2, 0}
end
local expected = tonumber(redis.call('HGET', meta, 'next_seq') or '0')
if seq + count <= expected then
  return {0, expected}
end
if seq ~= expected then
  return {-1, expected}
end
local n_sse = tonumber(ARGV[9])
-- A sealed response keeps its events packed (seal.lua) and their count in the hash.
local sse_count = tonumber(redis.call('HGET', meta, 'sse_count') or redis.call('LLEN', sse))
if n_sse > 0 and sse_count ~= tonumber(ARGV[8]) then
  return {-3, sse_count}
end

if n_sse > 0 then
  redis.call('RPUSH', sse, unpack(ARGV, 10, 9 + n_sse))
end
redis.call('HSET', meta, 'next_seq', seq + count, 'status', ARGV[4])
if ARGV[5] ~= '' and redis.call('HEXISTS', meta, 'sealed') == 0 then
  redis.call('HSET', meta, 'response', ARGV[5])
end
if ARGV[6] ~= '' then
  redis.call('HSETNX', meta, 'owner', ARGV[6])
end
local first_item = 10 + n_sse
if #ARGV >= first_item then
  local position = tonumber(redis.call('HGET', meta, 'input_next') or '0')
  position = add_items(KEYS[3], KEYS[4], ARGV, first_item, position)
  redis.call('HSET', meta, 'input_next', position)
end
refresh(KEYS, ttl)
if n_sse > 0 then
  -- Readers waiting on the response re-read the list; the number is only a hint.
  redis.call('PUBLISH', ARGV[7], sse_count + n_sse - 1)
end
return {1, seq + count}
