-- defer: hand leased notifications back to the due set for later, without counting an
-- attempt: over their rate key's quota, their host at its concurrency cap, or paused by
-- a receiver's Retry-After.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 wake channel, then per notification 3 values: id, lease, delay ms
-- A notification whose lease is no longer the caller's is left alone; one whose cancel
-- was asked for is cancelled instead.
-- Returns {new earliest 0|1, then per notification 1 if deferred, 0 if left alone}.
local now = now_ms(true)
local out = {0}

for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local st = load_state(id)
  if st and st.state == 'in_flight' and st.lease == tonumber(ARGV[i + 1]) then
    local due = hand_back(id, st, now, now + tonumber(ARGV[i + 2]))
    save_state(id, st)
    if due and out[1] == 0 and announce_if_earliest(id, ARGV[1]) then
      out[1] = 1
    end
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
