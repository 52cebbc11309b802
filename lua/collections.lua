-- collections: writes documents of collections (src/store/collections.rs), all or none:
-- every change only if each key holds what its writer expects.
-- KEYS: per collection the write touches, 2 keys: its documents hash (key → document)
--       and its keys sorted set (every key at score 0, listed in the order of its bytes)
-- ARGV: per change 6 values: the index of its collection's first key in KEYS, its key,
--       what the key must hold ('*' anything, '-' nothing, '=' the next value), the
--       document expected, and the write: 'p' put the last value, 'd' delete
-- Returns 1 when the changes were applied, 0 when one's expectation did not hold
-- (nothing written).
local WIDTH = 6
if #ARGV % WIDTH ~= 0 then
  return redis.error_reply('collections: ' .. #ARGV .. ' arguments are not changes of ' .. WIDTH)
end
for i = 1, #ARGV, WIDTH do
  local docs, key, expect = KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2]
  if expect ~= '*' then
    local held = redis.call('HGET', docs, key)
    if (expect == '-' and held) or (expect == '=' and held ~= ARGV[i + 3]) then return 0 end
  end
end
for i = 1, #ARGV, WIDTH do
  local at = tonumber(ARGV[i])
  local docs, keys, key = KEYS[at], KEYS[at + 1], ARGV[i + 1]
  if ARGV[i + 4] == 'p' then
    if redis.call('HSET', docs, key, ARGV[i + 5]) == 1 then redis.call('ZADD', keys, 0, key) end
  else
    if redis.call('HDEL', docs, key) == 1 then redis.call('ZREM', keys, key) end
  end
end
return 1
