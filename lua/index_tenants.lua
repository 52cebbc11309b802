-- index_tenants: puts notifications an earlier build stored, which kept no index per
-- tenant, into their tenants' own indexes (common.lua), a bounded batch at a time, as an
-- instance starts (src/store/redis_store/upgrade.rs).
-- KEYS: the shard's keys (see common.lua), then the tenants' own indexes (groups of three)
-- ARGV: 1 the number of tenant groups, then each group's values (common.lua,
--       `read_groups`), then per notification: its id, the shard's index it was read in
--       ('due', 'inflight', 'dead' or 'done'), the index in KEYS of its tenant's group
-- Each still in that index goes into its tenant's index that mirrors it, at its score
-- there, and its tenant into the shard's tenant_names; one that has moved since is left
-- alone (the move kept its tenant's indexes). One in flight is only named: its tenant's
-- pending index takes it when it settles (its due time is in its record).
-- Returns the number indexed.
local groups, first = read_groups(1)
local n = 0
for i = first, #ARGV, 3 do
  local id, index, g = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local score = redis.call('ZSCORE', INDEX[index], id)
  if score then
    if index ~= 'inflight' then redis.call('ZADD', own_key(g, index), score, id) end
    redis.call('SADD', KEYS[10], tenant_name(groups[g].tenant))
    n = n + 1
  end
end
return n
