-- settle: record the outcome of attempts and move each notification on: delivered,
-- cancelled when a cancel was asked for during the attempt, scheduled at its next tier,
-- or dead when the schedule is exhausted.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 wake channel, 2 dead max age ms, 3 dead max count, 4 finished max age ms, then
--       per attempt 9 values: id, lease, outcome ('delivered', 'failed' or 'gone'),
--       status ('' when no response), error ('' when none), duration ms, first bytes of
--       the response, retry-after ms (0: none), jitter in thousandths of the interval
-- A failure is retried `schedule[attempts]` later, stretched by the jitter and at least
-- the retry-after; 'gone', or a failure of the last attempt, is dead at once.
-- An attempt whose lease is not the current one (the lease expired and the notification
-- was claimed again, or it already finished) changes nothing. Then retention: dead
-- letters past their age or beyond their count, and finished notifications past their
-- age, are deleted and counted, a bounded number per call (enough to keep up).
-- Returns {new earliest 0|1, number trimmed, then per attempt 1 if applied, 0 if ignored}.
local FIRST = 5
local now = now_ms(true)
local out = {0, 0}

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

-- The wait before the next attempt after failed attempt number `n`.
local function next_wait(st, n, retry_after, jitter)
  local wait = st.schedule[n]
  if jitter ~= 0 then wait = math.ceil(wait * (1000 + jitter) / 1000) end
  return math.max(wait, retry_after)
end

local function settle_one(id, lease, outcome, status, err, duration, response, retry_after,
                          jitter)
  local st = load_state(id)
  if not st or st.state ~= 'in_flight' or st.lease ~= lease then return 0 end

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
    finish(id, st, 'delivered', KEYS[7], now)
  elseif st.cancel_requested then
    finish(id, st, 'cancelled', KEYS[7], now)
  elseif outcome == 'gone' or st.attempts >= st.max_attempts then
    finish(id, st, 'dead', KEYS[3], now)
  else
    schedule_at(id, st, now + next_wait(st, st.attempts, retry_after, jitter))
    if out[1] == 0 and announce_if_earliest(id, ARGV[1], st.next_at) then
      out[1] = 1
    end
  end
  save_state(id, st)
  return 1
end

for i = FIRST, #ARGV, 9 do
  table.insert(out, settle_one(ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3],
    ARGV[i + 4], tonumber(ARGV[i + 5]), ARGV[i + 6], tonumber(ARGV[i + 7]),
    tonumber(ARGV[i + 8])))
end
out[2] = apply_retention(now, 2, math.floor(2 * (#ARGV - FIRST + 1) / 9) + 16)
return out
