-- discard: delete a dead letter for good.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 id
-- Returns 1 when discarded, 0 when there is no such dead letter.
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[3], id) then return 0 end
redis.call('ZREM', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HDEL', KEYS[5], id)
redis.call('HDEL', KEYS[6], id)
return 1
