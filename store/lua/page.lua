-- One page of an item list (a response's input items or a conversation's items).
-- KEYS: meta, order (sorted set), items (hash).
-- ARGV: the meta field that says the owner exists, after id ('' none), before id ('' none),
--       limit, order ('asc' or 'desc').
-- Returns {0} no such owner, {-1} unknown after id, {-2} unknown before id,
-- else {1, has_more, item JSON...} in the requested order.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {0}
end
local after, before, limit = ARGV[2], ARGV[3], tonumber(ARGV[4])
local after_score, before_score
if after ~= '' then
  after_score = redis.call('ZSCORE', KEYS[2], after)
  if not after_score then return {-1} end
end
if before ~= '' then
  before_score = redis.call('ZSCORE', KEYS[2], before)
  if not before_score then return {-2} end
end

-- With `before` the page is the `limit` items just before it, so it is read backwards
-- from that cursor (towards `after`) and turned round at the end.
local backwards = before ~= ''
local start_score, stop_score = after_score, before_score
if backwards then
  start_score, stop_score = before_score, after_score
end
local ids
if (ARGV[5] == 'asc') ~= backwards then
  local low = start_score and ('(' .. start_score) or '-inf'
  local high = stop_score and ('(' .. stop_score) or '+inf'
  ids = redis.call('ZRANGEBYSCORE', KEYS[2], low, high, 'LIMIT', 0, limit + 1)
else
  local high = start_score and ('(' .. start_score) or '+inf'
  local low = stop_score and ('(' .. stop_score) or '-inf'
  ids = redis.call('ZREVRANGEBYSCORE', KEYS[2], high, low, 'LIMIT', 0, limit + 1)
end

local has_more = 0
if #ids > limit then
  has_more = 1
  ids[#ids] = nil
end
local result = {1, has_more}
if #ids == 0 then
  return result
end
local values = redis.call('HMGET', KEYS[3], unpack(ids))
local first, last, step = 1, #values, 1
if backwards then
  first, last, step = #values, 1, -1
end
for i = first, last, step do
  if values[i] then
    table.insert(result, values[i])
  end
end
return result
