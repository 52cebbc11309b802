-- trim: the periodic retention sweep, for when no settle has trimmed lately.
-- KEYS: the shard's keys (see common.lua), then the tenants' own indexes (groups of three)
-- ARGV: 1 the number of tenant groups, then each group's values (common.lua,
--       `read_groups`; its budget: most notifications deleted from each of its indexes)
-- Deletes each group's dead letters past their age or beyond their count and finished
-- (delivered or cancelled) notifications past their age, with their records, counting
-- each; forgets a tenant that has nothing left in the shard. Also deletes the tenants'
-- window counts older than the last hour.
-- Returns per group, in order, the number it deleted: a caller that gets a full budget
-- back for a group calls again for it.
local now = now_ms(false)
forget_old_windows(now)
local groups = read_groups(1)
local out = {}
for i = 2, #ARGV, GROUP_WIDTH do
  local g = tonumber(ARGV[i])
  local group = groups[g]
  out[#out + 1] = apply_retention(now, g, group, true, true)
  local empty = redis.call('EXISTS', KEYS[g], KEYS[g + 1], KEYS[g + 2]) == 0
  if empty then redis.call('SREM', KEYS[10], tenant_name(group.tenant)) end
end
return out
