-- endpoints: writes endpoints' health records (src/store/endpoints.rs), each only where
-- it is still as postback read it, so that two instances adding to one record at once
-- both count, and with it the endpoint's pause. No arithmetic here: postback works each
-- new record out.
-- KEYS: 1 the records hash (key → JSON), 2 the keys sorted set (every key at score 0,
--       listed in the order of their bytes), 3 the pauses hash (key → the pause's JSON)
-- ARGV: per record 4 values: its key, the record as read ('' when there was none), the
--       new record ('': delete it, as retention does, unless the endpoint is paused),
--       and its pause: '' leave it, '-' remove it (a resume), else set it unless the
--       endpoint is paused already
-- Returns two lists: the keys whose record changed since it was read, or is kept to be
-- deleted since its endpoint is paused (nothing written for them), and the keys whose
-- pause was set or removed.
local WIDTH = 4
if #ARGV % WIDTH ~= 0 then
  return redis.error_reply('endpoints: ' .. #ARGV .. ' arguments are not records of ' .. WIDTH)
end
local changed, paused = {}, {}
for i = 1, #ARGV, WIDTH do
  local key, read, new, pause = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local kept = new == '' and read ~= '' and redis.call('HEXISTS', KEYS[3], key) == 1
  if kept or (redis.call('HGET', KEYS[1], key) or '') ~= read then
    changed[#changed + 1] = key
  else
    if new == '' and read ~= '' then
      redis.call('HDEL', KEYS[1], key)
      redis.call('ZREM', KEYS[2], key)
    elseif new ~= read then
      redis.call('HSET', KEYS[1], key, new)
      if read == '' then redis.call('ZADD', KEYS[2], 0, key) end
    end
    local done = 0
    if pause == '-' then
      done = redis.call('HDEL', KEYS[3], key)
    elseif pause ~= '' then
      done = redis.call('HSETNX', KEYS[3], key, pause)
    end
    if done == 1 then paused[#paused + 1] = key end
  end
end
return {changed, paused}
