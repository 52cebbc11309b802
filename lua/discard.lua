-- discard: delete dead letters for good.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: the ids (a bounded batch)
-- An id that is not dead (any more) is left alone.
-- Returns the number discarded.
local now, tenants = now_ms(false), has_tenants()
local n = 0
for _, id in ipairs(ARGV) do
  local score = redis.call('ZSCORE', KEYS[3], id)
  if score then
    if tenants then
      tally(tenant_of(redis.call('HGET', KEYS[4], id)), 'dead', tonumber(score), -1, now)
    end
    redis.call('ZREM', KEYS[3], id)
    forget(id)
    n = n + 1
  end
end
flush_tally()
return n
