-- tenants: the tenant of each notification named, as its spec's first line says, so that
-- postback can name the tenants' own indexes a later call changes (common.lua).
-- KEYS: the shard's keys (see common.lua)
-- ARGV: the ids (a bounded batch)
-- Returns per id its tenant ('' for the default one), or false when it is not stored.
local out = {}
for i, id in ipairs(ARGV) do
  local spec = redis.call('HGET', KEYS[4], id)
  out[i] = spec and tenant_of(spec) or false
end
return out
