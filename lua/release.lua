-- release: hand leased notifications back, due at once (or when they were due, for one
-- claimed before it was due), without counting an attempt:
-- at shutdown, deliveries that did not finish within the grace period; after a claim
-- whose reply was lost, the notifications that claim leased.
-- KEYS: the shard's keys (see common.lua), 9 claim record (optional; its "id lease"
--       pairs are released and it is deleted)
-- ARGV: 1 wake channel, then per notification: id, lease
-- A notification whose lease is no longer the caller's is left alone; one whose cancel
-- was asked for is cancelled instead.
-- Returns the number released.
local now = now_ms(false)

local leases = {}
for i = 2, #ARGV do
  table.insert(leases, ARGV[i])
end
if KEYS[9] then
  local saved = redis.call('GET', KEYS[9])
  if saved then
    for word in string.gmatch(saved, '%S+') do
      table.insert(leases, word)
    end
    redis.call('DEL', KEYS[9])
  end
end

local released = 0
for i = 1, #leases, 2 do
  local id = leases[i]
  local st = load_state(id)
  if st and st.state == 'in_flight' and st.lease == tonumber(leases[i + 1]) then
    if hand_back(id, st, now, due_again(st, now)) then released = released + 1 end
    save_state(id, st)
  end
end
if released > 0 then announce(ARGV[1]) end
return released
