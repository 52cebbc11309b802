-- reserve: send times in rate keys' quotas, shared by every instance (GCRA; the same
-- arithmetic as src/policy/gcra.rs, which the embedded store runs).
-- KEYS: one state key per rate key ("<tat µs> <paused until µs>", expiring when it no
--   longer says more than no state would)
-- ARGV: per key, 5 values: interval µs (0: unlimited), tolerance µs (the burst), count
--   of send times to reserve, not before µs, pause µs (a Retry-After, 0: none)
-- Returns Redis's clock in µs, then per key: the earliest send time it allows (now, the
-- end of a pause, or not before) and its theoretical arrival time before this call; the
-- i-th send time is max(start, tat + i * interval - tolerance).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {now}
for i, key in ipairs(KEYS) do
  local a = (i - 1) * 5
  local interval = tonumber(ARGV[a + 1])
  local count = tonumber(ARGV[a + 3])
  local not_before = tonumber(ARGV[a + 4])
  local pause = tonumber(ARGV[a + 5])
  local tat, paused = 0, 0
  local state = redis.call('GET', key)
  if state then
    local s1, s2 = string.match(state, '^(%d+) (%d+)$')
    tat, paused = tonumber(s1) or 0, tonumber(s2) or 0
  end
  if pause > 0 then
    paused = math.max(paused, now + pause)
  end
  local start = math.max(now, paused, not_before)
  tat = math.max(tat, start)
  local new_tat = tat + count * interval
  local keep = math.max(new_tat, paused) - now
  if keep > 0 then
    redis.call('SET', key, string.format('%d %d', new_tat, paused), 'PX', math.ceil(keep / 1000))
  else
    redis.call('DEL', key)
  end
  out[#out + 1] = start
  out[#out + 1] = tat
end
return out
