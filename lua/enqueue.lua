-- enqueue: register a notification and schedule its first attempt.
-- KEYS: the shard's keys (see common.lua), 9 idempotency key (optional)
-- ARGV: 1 id, 2 spec (JSON), 3 schedule (JSON array of ms), 4 delay ms, 5 wake channel,
--       6 idempotency ttl ms
-- Returns {id, state JSON, duplicate 0|1, new earliest 0|1}. With an idempotency key that
-- was seen before, nothing is stored and the first notification is returned.
local now = now_ms(true)
local id = ARGV[1]

if KEYS[9] then
  local existing = redis.call('GET', KEYS[9])
  if existing then
    return {existing, redis.call('HGET', KEYS[5], existing) or false, 1, 0}
  end
  redis.call('SET', KEYS[9], id, 'PX', ARGV[6])
end

local schedule = cjson.decode(ARGV[3])
local st = {
  attempts = 0, max_attempts = #schedule + 1, schedule = schedule,
  lease = 0, created_at = now
}
redis.call('HSET', KEYS[4], id, ARGV[2])
schedule_at(id, st, now + tonumber(ARGV[4]))
local encoded = save_state(id, st)
local earliest = announce_if_earliest(id, ARGV[5], st.next_at) and 1 or 0
return {id, encoded, 0, earliest}
