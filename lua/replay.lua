-- replay: send a dead letter again, from a fresh attempt count.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 id, 2 new spec JSON ('' keeps the spec), 3 new schedule JSON array of ms
--       ('' keeps the schedule), 4 delay ms, 5 wake channel
-- The attempt history is kept; `replays` counts how often it was replayed.
-- Returns {'replayed' | 'not_dead' | 'missing', state JSON}.
local id = ARGV[1]
local st, raw = load_state(id)
if not st then return {'missing', false} end
if st.state ~= 'dead' then return {'not_dead', raw} end

if ARGV[2] ~= '' then redis.call('HSET', KEYS[4], id, ARGV[2]) end
if ARGV[3] ~= '' then st.schedule = cjson.decode(ARGV[3]) end
st.max_attempts = #st.schedule + 1
st.attempts = 0
st.replays = (st.replays or 0) + 1
st.finished_at = nil
redis.call('ZREM', KEYS[3], id)
schedule_at(id, st, now_ms(true) + tonumber(ARGV[4]))
local encoded = save_state(id, st)
announce_if_earliest(id, ARGV[5], st.next_at)
return {'replayed', encoded}
