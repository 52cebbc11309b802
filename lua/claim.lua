-- claim: lease up to N due notifications to the caller, atomically.
-- KEYS: the shard's keys (see common.lua), 11 claim record
-- ARGV: 1 limit (at most 1000), 2 lease ms, 3 ahead ms
-- Moves up to `limit` notifications due by now + ahead (the caller holds each until its
-- due time) to in-flight with a lease deadline (their tenants' pending indexes keep them
-- where they were: common.lua). The state record is not written: being
-- in the in-flight index is what makes a notification in flight, and the caller reads
-- its lease number and attempts from the record returned (for one never attempted,
-- none: it makes the record it has from its registration). The deadline and the ids
-- claimed are kept in the claim record for the lease's length, so that a caller that
-- never got this reply (a timeout) can hand them back instead of waiting.
-- Also returns up to `limit` notifications whose lease has expired (their worker died),
-- as they are now, for the caller to hand back (commit.lua); they stay in flight until
-- one does.
-- Returns {now in µs, next wake ms or -1, number expired, then per expired: id, state
-- (held_of in common.lua), then per job claimed: id, state record (false when it has
-- none yet), spec, its score in the due index}: its due time, which its record does not
-- say when its turn behind its ordering key came (leave_order in common.lua).
local time_us = now_us()
local now = math.floor(time_us / 1000)
local limit = tonumber(ARGV[1])
local lease_ms = tonumber(ARGV[2])
local until_ms = now + tonumber(ARGV[3])

-- The earliest lease end. Leases that ended are read only when there are some (they
-- stay in flight until handed back), and the earliest once this call is done is this
-- one or the end of the leases it grants, so the set is not read again.
local first_lease = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local next_lease = first_lease[2] and tonumber(first_lease[2])
local expired = {}
if next_lease and next_lease <= now then
  expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
end
local out = {time_us, -1, #expired}
for _, id in ipairs(expired) do
  out[#out + 1], out[#out + 2] = id, held_of(id)
end

local claimed = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', until_ms, 'WITHSCORES', 'LIMIT', 0, limit)
local ids, scores = {}, {}
for j = 1, #due, 2 do
  ids[#ids + 1], scores[#scores + 1] = due[j], due[j + 1]
end
if #ids > 0 then
  -- One command per structure for the whole batch (at most 1000 ids, within unpack's
  -- limit), rather than several per notification.
  redis.call('ZREM', KEYS[1], unpack(ids))
  local states = redis.call('HMGET', KEYS[5], unpack(ids))
  local specs = redis.call('HMGET', KEYS[4], unpack(ids))
  -- Every lease of the call ends at the same time: formatted once, not by Redis for
  -- each member (a number argument is formatted with %.17g, glibc's slow path).
  local deadline = string.format('%d', now + lease_ms)
  local leases = {}
  for j, id in ipairs(ids) do
    -- One with no state record has its registration's (lifecycle::transitions::register), which the caller
    -- makes from the spec's first line: no string work here per notification. A spec of
    -- an earlier build ('{' first) always came with a record.
    if specs[j] and (states[j] or has_first_line(specs[j])) then
      leases[#leases + 1], leases[#leases + 2] = deadline, id
      local o = #out
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, states[j], specs[j], scores[j]
      claimed[#claimed + 1] = id
    end
  end
  if #leases > 0 then
    redis.call('ZADD', KEYS[2], unpack(leases))
    local ends = now + lease_ms
    if not next_lease or ends < next_lease then next_lease = ends end
  end
  -- A spec that names a tenant always has its first line, so each is among those claimed.
  if #claimed > 0 and has_tenants() then
    for j = 1, #ids do
      local tenant = tenant_of(specs[j])
      tally(tenant, 'due', nil, -1, now)
      tally(tenant, 'inflight', nil, 1, now)
    end
    flush_tally()
  end
  if #claimed > 0 then
    redis.call('SET', KEYS[11], deadline .. ' ' .. table.concat(claimed, ' '), 'PX', lease_ms)
  end
end

local next_due = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wake = -1
if next_due[2] and tonumber(next_due[2]) < HELD then wake = tonumber(next_due[2]) end
if next_lease and (wake < 0 or next_lease < wake) then wake = next_lease end
out[2] = wake
return out
