-- defer: hand leased notifications back to the due set for later, without counting an
-- attempt: over their rate key's quota, their host at its concurrency cap, or paused by
-- a receiver's Retry-After.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 wake channel, then per notification 3 values: id, lease, delay ms
-- A notification whose lease is no longer the caller's is left alone; one whose cancel
-- was asked for is cancelled instead. The batch is read and written with one command
-- per structure (a busy host can defer hundreds at a time).
-- Returns {new earliest 0|1, then per notification 1 if deferred, 0 if left alone}.
local WIDTH = 3
local now = now_ms(true)
local out = {0}

local ids, states, flying = leased_batch(2, WIDTH)
if #ids == 0 then return out end

-- What the batch writes: the ids handed back, field/value pairs for HSET, score/member
-- pairs for ZADD.
local w = {handed = {}, state = {}, due = {}}
local seen = {}

local function defer_one(j, i)
  local id = ids[j]
  local st = held_state(ids, states, flying, seen, j, i)
  if not st then return 0 end
  if st.cancel_requested then
    hand_back(id, st, now, now)
    save_state(id, st)
    return 1
  end
  end_lease(st)
  st.state = 'scheduled'
  st.next_at = now + tonumber(ARGV[i + 2])
  table.insert(w.handed, id)
  table.insert(w.state, id)
  table.insert(w.state, cjson.encode(st))
  table.insert(w.due, st.next_at)
  table.insert(w.due, id)
  return 1
end

for j = 1, #ids do
  table.insert(out, defer_one(j, 2 + (j - 1) * WIDTH))
end
if #w.handed > 0 then
  redis.call('ZREM', KEYS[2], unpack(w.handed))
  redis.call('HSET', KEYS[5], unpack(w.state))
  redis.call('ZADD', KEYS[1], unpack(w.due))
  if announce_if_heads(ARGV[1], w.due) then out[1] = 1 end
end
return out
