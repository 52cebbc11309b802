-- replay: send a dead letter again, from a fresh attempt count.
-- KEYS: 1 due, 2 inflight, 3 dead, 4 jobs, 5 state, 6 history, 7 done
-- ARGV: 1 id, 2 new spec JSON ('' keeps the spec), 3 new schedule JSON array of ms
--       ('' keeps the schedule), 4 delay ms, 5 wake channel
-- The attempt history is kept; `replays` counts how often it was replayed.
-- Returns {'replayed' | 'not_dead' | 'missing', state JSON}.
local t = redis.call('TIME')
-- Rounded up, so that a time computed from it is never early.
local now = tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
local id = ARGV[1]
local raw = redis.call('HGET', KEYS[5], id)
if not raw then return {'missing', false} end
local st = cjson.decode(raw)
if st.state ~= 'dead' then return {'not_dead', raw} end

if ARGV[2] ~= '' then redis.call('HSET', KEYS[4], id, ARGV[2]) end
if ARGV[3] ~= '' then st.schedule = cjson.decode(ARGV[3]) end
st.max_attempts = #st.schedule + 1
st.attempts = 0
st.replays = (st.replays or 0) + 1
st.state = 'scheduled'
st.next_at = now + tonumber(ARGV[4])
st.finished_at = nil
redis.call('ZREM', KEYS[3], id)
redis.call('ZADD', KEYS[1], st.next_at, id)
local encoded = cjson.encode(st)
redis.call('HSET', KEYS[5], id, encoded)
if redis.call('ZRANGE', KEYS[1], 0, 0)[1] == id then
  redis.call('PUBLISH', ARGV[5], st.next_at)
end
return {'replayed', encoded}
