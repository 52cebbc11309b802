-- enqueue: register a notification and schedule its first attempt.
-- KEYS: 1 due, 2 inflight, 3 dead, 4 jobs, 5 state, 6 history, 7 done, 8 idempotency key (optional)
-- ARGV: 1 id, 2 spec (JSON), 3 schedule (JSON array of ms), 4 delay ms, 5 wake channel,
--       6 idempotency ttl ms
-- Returns {id, state JSON, duplicate 0|1, new earliest 0|1}. With an idempotency key that
-- was seen before, nothing is stored and the first notification is returned.
local t = redis.call('TIME')
-- Rounded up, so that a time computed from it is never early.
local now = tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
local id = ARGV[1]

if KEYS[8] then
  local existing = redis.call('GET', KEYS[8])
  if existing then
    return {existing, redis.call('HGET', KEYS[5], existing) or false, 1, 0}
  end
  redis.call('SET', KEYS[8], id, 'PX', ARGV[6])
end

local schedule = cjson.decode(ARGV[3])
local due = now + tonumber(ARGV[4])
local state = cjson.encode({
  state = 'scheduled', attempts = 0, max_attempts = #schedule + 1, schedule = schedule,
  lease = 0, created_at = now, next_at = due
})
redis.call('HSET', KEYS[4], id, ARGV[2])
redis.call('HSET', KEYS[5], id, state)
redis.call('ZADD', KEYS[1], due, id)

local earliest = 0
if redis.call('ZRANGE', KEYS[1], 0, 0)[1] == id then
  earliest = 1
  redis.call('PUBLISH', ARGV[5], due)
end
return {id, state, 0, earliest}
