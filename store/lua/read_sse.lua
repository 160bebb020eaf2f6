-- A response's SSE events from list index ARGV[1] on, whichever way they are kept.
-- KEYS: meta, sse. Returns {1, sealed value} for a sealed response (seal.lua), else
-- {0, event, event, ...}.
local sealed = redis.call('HGET', KEYS[1], 'sealed')
if sealed then
  return {1, sealed}
end
local events = redis.call('LRANGE', KEYS[2], tonumber(ARGV[1]), -1)
table.insert(events, 1, 0)
return events
