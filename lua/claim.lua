-- claim: lease up to N due notifications to the caller, atomically.
-- KEYS: 1 due, 2 inflight, 3 dead, 4 jobs, 5 state, 6 history, 7 done, 8 claim record
-- ARGV: 1 limit (at most 1000), 2 lease ms
-- First returns up to `limit` expired leases (their worker died) to due (or cancels them,
-- when a cancel was asked for meanwhile), then moves up to
-- `limit` due notifications to in-flight with a lease deadline, bumping each one's lease
-- number so that a settle from an older lease is ignored. The claimed "id lease" pairs
-- are kept in the claim record for the lease's length, so that a caller that never got
-- this reply (a timeout) can hand them back with release.lua instead of waiting.
-- Returns {now, next wake ms or -1, then per job: id, lease, attempts so far, due at, spec}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local lease_ms = tonumber(ARGV[2])

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  local raw = redis.call('HGET', KEYS[5], id)
  if raw then
    local st = cjson.decode(raw)
    if st.cancel_requested then
      st.state = 'cancelled'
      st.finished_at = now
      redis.call('ZADD', KEYS[7], now, id)
    else
      st.state = 'scheduled'
      st.next_at = now
      redis.call('ZADD', KEYS[1], now, id)
    end
    redis.call('HSET', KEYS[5], id, cjson.encode(st))
  end
end

local out = {now, -1}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
for i = 1, #due, 2 do
  local id = due[i]
  redis.call('ZREM', KEYS[1], id)
  local raw = redis.call('HGET', KEYS[5], id)
  local spec = redis.call('HGET', KEYS[4], id)
  if raw and spec then
    local st = cjson.decode(raw)
    st.state = 'in_flight'
    st.lease = st.lease + 1
    redis.call('HSET', KEYS[5], id, cjson.encode(st))
    redis.call('ZADD', KEYS[2], now + lease_ms, id)
    table.insert(out, id)
    table.insert(out, st.lease)
    table.insert(out, st.attempts)
    table.insert(out, tonumber(due[i + 1]))
    table.insert(out, spec)
  end
end

if #out > 2 then
  local claimed = {}
  for i = 3, #out, 5 do
    table.insert(claimed, out[i] .. ' ' .. out[i + 1])
  end
  redis.call('SET', KEYS[8], table.concat(claimed, ' '), 'PX', lease_ms)
end

local next_due = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_lease = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local wake = -1
if next_due[2] then wake = tonumber(next_due[2]) end
if next_lease[2] and (wake < 0 or tonumber(next_lease[2]) < wake) then
  wake = tonumber(next_lease[2])
end
out[2] = wake
return out
