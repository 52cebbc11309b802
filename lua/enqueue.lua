-- enqueue: register a group of notifications and schedule each one's first attempt.
-- KEYS: the shard's keys (see common.lua), then the idempotency keys of those that have one
-- ARGV: 1 wake channel, then per notification 6 values: id, spec (JSON), schedule
--       (intervals in ms, comma-separated), delay ms, index in KEYS of its idempotency key
--       (0: none), idempotency ttl ms
-- A notification whose idempotency key was seen before (earlier, or earlier in this
-- group) stores nothing: the first notification of that key is answered instead. The
-- group is written with one command per structure.
-- Returns {new earliest 0|1, then per notification: id, state JSON (false when retention
-- has deleted the notification its key names), duplicate 0|1}.
local WIDTH = 6
local now = now_ms(true)
local out = {0}
local w = {jobs = {}, state = {}, due = {}}
local created = {}

for i = 2, #ARGV, WIDTH do
  local id, key = ARGV[i], tonumber(ARGV[i + 4])
  local existing = key > 0 and redis.call('GET', KEYS[key])
  if existing then
    local st = created[existing]
    if not st then
      local raw = redis.call('HGET', KEYS[5], existing)
      st = raw and as_seen(existing, raw) or false
    end
    out[#out + 1], out[#out + 2], out[#out + 3] = existing, st, 1
  else
    if key > 0 then redis.call('SET', KEYS[key], id, 'PX', ARGV[i + 5]) end
    local schedule = ARGV[i + 2]
    local st = {
      state = 'scheduled', attempts = 0, max_attempts = count_intervals(schedule) + 1,
      schedule = schedule, lease = 0, created_at = now, next_at = now + tonumber(ARGV[i + 3])
    }
    local encoded = cjson.encode(st)
    created[id] = encoded
    local jobs, states, due = w.jobs, w.state, w.due
    jobs[#jobs + 1], jobs[#jobs + 2] = id, ARGV[i + 1]
    states[#states + 1], states[#states + 2] = id, encoded
    due[#due + 1], due[#due + 2] = st.next_at, id
    out[#out + 1], out[#out + 2], out[#out + 3] = id, encoded, 0
  end
end

if #w.due > 0 then
  redis.call('HSET', KEYS[4], unpack(w.jobs))
  redis.call('HSET', KEYS[5], unpack(w.state))
  redis.call('ZADD', KEYS[1], unpack(w.due))
  if announce_if_heads(ARGV[1], w.due) then out[1] = 1 end
end
return out
