-- cancel: stop a notification that has not finished.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 id
-- A scheduled notification is cancelled at once and never sent. One in flight keeps its
-- current attempt, which is recorded; it is then cancelled instead of retried. Which of
-- the two it is, the indexes say: a claim does not write the state record.
-- Returns {'cancelled' | 'requested' | 'finished' | 'missing', state JSON}.
local id = ARGV[1]
local st, raw = load_state(id)
if not st then return {'missing', false} end

if redis.call('ZSCORE', KEYS[2], id) then
  st.cancel_requested = true
  return {'requested', save_state(id, st)}
elseif redis.call('ZREM', KEYS[1], id) == 1 then
  finish(id, st, 'cancelled', KEYS[7], now_ms(false))
  return {'cancelled', save_state(id, st)}
end
return {st.state == 'cancelled' and 'cancelled' or 'finished', raw}
