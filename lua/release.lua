-- release: hand leased notifications back, due at once, without counting an attempt:
-- at shutdown, deliveries that did not finish within the grace period; after a claim
-- whose reply was lost, the notifications that claim leased.
-- KEYS: 1 due, 2 inflight, 3 dead, 4 jobs, 5 state, 6 history, 7 done,
--       8 claim record (optional; its "id lease" pairs are released and it is deleted)
-- ARGV: 1 wake channel, then per notification: id, lease
-- A notification whose lease is no longer the caller's is left alone; one whose cancel
-- was asked for is cancelled instead.
-- Returns the number released.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local leases = {}
for i = 2, #ARGV do
  table.insert(leases, ARGV[i])
end
if KEYS[8] then
  local saved = redis.call('GET', KEYS[8])
  if saved then
    for word in string.gmatch(saved, '%S+') do
      table.insert(leases, word)
    end
    redis.call('DEL', KEYS[8])
  end
end

local released = 0
for i = 1, #leases, 2 do
  local id = leases[i]
  local raw = redis.call('HGET', KEYS[5], id)
  if raw then
    local st = cjson.decode(raw)
    if st.state == 'in_flight' and st.lease == tonumber(leases[i + 1]) then
      redis.call('ZREM', KEYS[2], id)
      if st.cancel_requested then
        st.state = 'cancelled'
        st.finished_at = now
        redis.call('ZADD', KEYS[7], now, id)
      else
        st.state = 'scheduled'
        st.next_at = now
        redis.call('ZADD', KEYS[1], now, id)
        released = released + 1
      end
      redis.call('HSET', KEYS[5], id, cjson.encode(st))
    end
  end
end
if released > 0 then redis.call('PUBLISH', ARGV[1], now) end
return released
