-- discard: delete dead letters for good.
-- KEYS: the shard's keys (see common.lua), then the tenants' own indexes (groups of three)
-- ARGV: 1 the number of tenant groups, then each group's values (common.lua,
--       `read_groups`), then per dead letter (a bounded batch): its id, the index in KEYS
--       of its tenant's group
-- An id that is not dead (any more) is left alone.
-- Returns the number discarded.
local now = now_ms(false)
local groups, first = read_groups(1)
local n = 0
for i = first, #ARGV, 2 do
  local id, g = ARGV[i], tonumber(ARGV[i + 1])
  local score = redis.call('ZSCORE', KEYS[3], id)
  if score then
    local tenant = groups[g].tenant
    if tenant ~= '' then tally(tenant, 'dead', tonumber(score), -1, now) end
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZREM', own_key(g, 'dead'), id)
    forget(id)
    n = n + 1
  end
end
flush_tally()
return n
