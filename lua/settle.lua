-- settle: record the outcome of attempts and move each notification on: delivered,
-- cancelled when a cancel was asked for during the attempt, scheduled at its next tier,
-- or dead when the schedule is exhausted.
-- KEYS: 1 due, 2 inflight, 3 dead, 4 jobs, 5 state, 6 history, 7 done
-- ARGV: 1 wake channel, then per attempt 7 values: id, lease, outcome ('delivered' or
--       'failed'), status ('' when no response), error ('' when none), duration ms,
--       first bytes of the response
-- An attempt whose lease is not the current one (the lease expired and the notification
-- was claimed again, or it already finished) changes nothing.
-- Returns {new earliest 0|1, then per attempt 1 if applied, 0 if ignored}.
local t = redis.call('TIME')
-- Rounded up, so that a time computed from it is never early.
local now = tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
local out = {0}

local function append_history(id, entry)
  local encoded = cjson.encode(entry)
  local h = redis.call('HGET', KEYS[6], id)
  if h then
    h = string.sub(h, 1, -2) .. ',' .. encoded .. ']'
  else
    h = '[' .. encoded .. ']'
  end
  redis.call('HSET', KEYS[6], id, h)
end

local function settle_one(id, lease, outcome, status, err, duration, response)
  local raw = redis.call('HGET', KEYS[5], id)
  if not raw then return 0 end
  local st = cjson.decode(raw)
  if st.state ~= 'in_flight' or st.lease ~= lease then return 0 end

  st.attempts = st.attempts + 1
  append_history(id, {
    at = now - duration,
    status = (status ~= '' and tonumber(status)) or cjson.null,
    error = (err ~= '' and err) or cjson.null,
    duration_ms = duration,
    response = response
  })
  redis.call('ZREM', KEYS[2], id)
  if outcome == 'delivered' then
    st.state = 'delivered'
    st.next_at = nil
    st.finished_at = now
    redis.call('ZADD', KEYS[7], now, id)
  elseif st.cancel_requested then
    st.state = 'cancelled'
    st.next_at = nil
    st.finished_at = now
    redis.call('ZADD', KEYS[7], now, id)
  elseif st.attempts >= st.max_attempts then
    st.state = 'dead'
    st.next_at = nil
    st.finished_at = now
    redis.call('ZADD', KEYS[3], now, id)
  else
    st.state = 'scheduled'
    st.next_at = now + st.schedule[st.attempts]
    redis.call('ZADD', KEYS[1], st.next_at, id)
    if out[1] == 0 and redis.call('ZRANGE', KEYS[1], 0, 0)[1] == id then
      out[1] = 1
      redis.call('PUBLISH', ARGV[1], st.next_at)
    end
  end
  redis.call('HSET', KEYS[5], id, cjson.encode(st))
  return 1
end

for i = 2, #ARGV, 7 do
  table.insert(out, settle_one(ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3],
    ARGV[i + 4], tonumber(ARGV[i + 5]), ARGV[i + 6]))
end
return out
