-- release: hand leased notifications back, due at once (or when they were due, for one
-- claimed before it was due), without counting an attempt:
-- at shutdown, deliveries that did not finish within the grace period; after a claim
-- whose reply was lost, the notifications that claim leased.
-- KEYS: the shard's keys (see common.lua), 9 claim record (optional; its lease deadline
--       and ids are released and it is deleted)
-- ARGV: 1 wake channel, then per notification: id, lease
-- A notification whose lease is no longer the caller's (or, from a claim record, whose
-- lease deadline is no longer that claim's) is left alone; one whose cancel was asked
-- for is cancelled instead.
-- Returns the number released.
local now = now_ms(false)
local released = 0

-- Hands `id` back when `held(st, deadline)` says the lease is still the one released.
local function release(id, held)
  local st = load_state(id)
  local deadline = redis.call('ZSCORE', KEYS[2], id)
  if st and deadline and held(st, tonumber(deadline)) then
    if hand_back(id, st, now, due_again(st, now)) then released = released + 1 end
    save_state(id, st)
  end
end

for i = 2, #ARGV, 2 do
  local lease = tonumber(ARGV[i + 1])
  release(ARGV[i], function(st) return st.lease == lease end)
end
local saved = KEYS[9] and redis.call('GET', KEYS[9])
if saved then
  local words = string.gmatch(saved, '%S+')
  local claimed_until = tonumber(words())
  for id in words do
    release(id, function(_, deadline) return deadline == claimed_until end)
  end
  redis.call('DEL', KEYS[9])
end
if released > 0 then announce(ARGV[1]) end
return released
