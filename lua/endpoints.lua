-- endpoints: writes endpoints' health records (src/store/endpoints.rs), each only where
-- it is still as postback read it, so that two instances adding to one record at once
-- both count. No arithmetic here: postback works each new record out.
-- KEYS: 1 the records hash (key → JSON), 2 the keys sorted set (every key at score 0,
--       listed in the order of their bytes)
-- ARGV: per record 3 values: its key, the record as read ('' when there was none), the
--       new record ('': delete it, as retention does)
-- Returns the keys whose record changed since it was read (nothing written for them).
local WIDTH = 3
if #ARGV % WIDTH ~= 0 then
  return redis.error_reply('endpoints: ' .. #ARGV .. ' arguments are not records of ' .. WIDTH)
end
local changed = {}
for i = 1, #ARGV, WIDTH do
  local key, read, new = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if (redis.call('HGET', KEYS[1], key) or '') ~= read then
    changed[#changed + 1] = key
  elseif new == '' then
    redis.call('HDEL', KEYS[1], key)
    redis.call('ZREM', KEYS[2], key)
  else
    redis.call('HSET', KEYS[1], key, new)
    if read == '' then redis.call('ZADD', KEYS[2], 0, key) end
  end
end
return changed
