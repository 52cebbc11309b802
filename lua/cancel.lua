-- cancel: stop a notification that has not finished.
-- KEYS: 1 due, 2 inflight, 3 dead, 4 jobs, 5 state, 6 history, 7 done
-- ARGV: 1 id
-- A scheduled notification is cancelled at once and never sent. One in flight keeps its
-- current attempt, which is recorded; it is then cancelled instead of retried.
-- Returns {'cancelled' | 'requested' | 'finished' | 'missing', state JSON}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local raw = redis.call('HGET', KEYS[5], id)
if not raw then return {'missing', false} end
local st = cjson.decode(raw)

if st.state == 'scheduled' then
  redis.call('ZREM', KEYS[1], id)
  st.state = 'cancelled'
  st.next_at = nil
  st.finished_at = now
  redis.call('ZADD', KEYS[7], now, id)
elseif st.state == 'in_flight' then
  st.cancel_requested = true
else
  return {st.state == 'cancelled' and 'cancelled' or 'finished', raw}
end
local encoded = cjson.encode(st)
redis.call('HSET', KEYS[5], id, encoded)
return {st.state == 'cancelled' and 'cancelled' or 'requested', encoded}
