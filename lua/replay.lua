-- replay: send dead letters again, each from a fresh attempt count.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 new spec, meta JSON and body ('' keeps the spec; only with one id), 2 new
--       schedule (common.lua; '-' keeps the schedule, '' is a schedule without retries),
--       3 delay ms, 4 wake channel, then the ids (a bounded batch)
-- An id that is not dead (any more) is left alone, so that replaying twice changes
-- nothing. The attempt history is kept; `replays` counts how often it was replayed.
-- Returns {number replayed, then per id its new state JSON, or false when left alone}.
local now = now_ms(true)

-- Gives `id` a new spec (meta line and body), keeping the first line of the one stored,
-- which says what its registration was; an earlier build's spec has none, so its line
-- is made from the state record `st`.
local function replace_spec(id, st, spec)
  local old = redis.call('HGET', KEYS[4], id)
  local line_end = old and has_first_line(old) and string.find(old, '\n', 1, true)
  local line = line_end and string.sub(old, 1, line_end)
    or (string.format('%d', st.created_at) .. ' 0 ' .. st.schedule .. '\n')
  redis.call('HSET', KEYS[4], id, line .. spec)
end

local out = {0}
local earliest = false

for i = 5, #ARGV do
  local id = ARGV[i]
  local st = load_state(id)
  if st and st.state == 'dead' then
    if ARGV[2] ~= '-' then st.schedule = ARGV[2] end
    if ARGV[1] ~= '' then replace_spec(id, st, ARGV[1]) end
    st.max_attempts = count_intervals(st.schedule) + 1
    st.attempts = 0
    st.replays = (st.replays or 0) + 1
    st.finished_at = nil
    redis.call('ZREM', KEYS[3], id)
    schedule_at(id, st, now + tonumber(ARGV[3]))
    table.insert(out, save_state(id, st))
    out[1] = out[1] + 1
    earliest = earliest or redis.call('ZRANGE', KEYS[1], 0, 0)[1] == id
  else
    table.insert(out, false)
  end
end
if earliest then announce(ARGV[4]) end
return out
