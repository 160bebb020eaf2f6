-- The writes to an existing conversation: add items, replace metadata, delete an item.
-- KEYS: meta, order, items. ARGV: ttl, operation, then per operation:
--   'add': item id/JSON pairs;  'metadata': metadata JSON;  'delete_item': item id.
-- Returns false when the conversation does not exist; else 'add': 1, 'metadata': the
-- created_at, 'delete_item': 1 when the item was there, else 0.
if redis.call('HEXISTS', KEYS[1], 'created_at') == 0 then
  return false
end
local operation, result = ARGV[2], 1
if operation == 'add' then
  local position = tonumber(redis.call('HGET', KEYS[1], 'next_position') or '0')
  position = add_items(KEYS[2], KEYS[3], ARGV, 3, position)
  redis.call('HSET', KEYS[1], 'next_position', position)
elseif operation == 'metadata' then
  redis.call('HSET', KEYS[1], 'metadata', ARGV[3])
  result = redis.call('HGET', KEYS[1], 'created_at')
elseif operation == 'delete_item' then
  result = redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('HDEL', KEYS[3], ARGV[3])
else
  return redis.error_reply('unknown conversation operation ' .. operation)
end
refresh(KEYS, tonumber(ARGV[1]))
return result
