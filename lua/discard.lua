-- discard: delete dead letters for good.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: the ids (a bounded batch)
-- An id that is not dead (any more) is left alone.
-- Returns the number discarded.
local n = 0
for _, id in ipairs(ARGV) do
  if redis.call('ZSCORE', KEYS[3], id) then
    redis.call('ZREM', KEYS[3], id)
    forget(id)
    n = n + 1
  end
end
return n
