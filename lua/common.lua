-- Helpers put in front of every script by src/store/redis.rs. Every script receives the
-- shard's keys in this order: KEYS 1 due, 2 inflight, 3 dead, 4 jobs, 5 state,
-- 6 history, 7 done, 8 counters (then its own extra keys).

-- Redis time in µs.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Redis time in ms. Rounded up where a due time is computed from it, so that nothing
-- is early; rounded down where it is compared with due times.
local function now_ms(round_up)
  local ms = now_us() / 1000
  if round_up then return math.ceil(ms) end
  return math.floor(ms)
end

-- The state record of `id` (decoded, and as stored), or nil.
local function load_state(id)
  local raw = redis.call('HGET', KEYS[5], id)
  if raw then return cjson.decode(raw), raw end
  return nil, nil
end

local function save_state(id, st)
  local encoded = cjson.encode(st)
  redis.call('HSET', KEYS[5], id, encoded)
  return encoded
end

-- A batch of leased notifications whose arguments start at ARGV[first], `width` each,
-- the id first and the lease second: their ids, and their state records as stored.
local function leased_batch(first, width)
  local ids = {}
  for i = first, #ARGV, width do table.insert(ids, ARGV[i]) end
  if #ids == 0 then return ids, {} end
  return ids, redis.call('HMGET', KEYS[5], unpack(ids))
end

-- The decoded state of the batch's j-th notification (arguments from ARGV[i]) while the
-- caller still holds its lease, once per id in the batch (`seen` remembers); nil when
-- the lease is lost, the notification gone, or the id seen before. A claim does not
-- write the state record; instead the lease number goes up whenever the notification
-- leaves the in-flight index (`end_lease`), so a number that still matches is the
-- caller's own lease, still in flight.
local function held_state(ids, states, seen, j, i)
  local id = ids[j]
  if seen[id] or not states[j] then return nil end
  local st = cjson.decode(states[j])
  if st.lease ~= tonumber(ARGV[i + 1]) then return nil end
  seen[id] = true
  return st
end

-- The notification leaves the in-flight index: a later settle, deferral or release
-- under the lease it had is ignored.
local function end_lease(st)
  st.lease = st.lease + 1
end

-- The state record of `id` as a reader sees it: in flight while it is in the in-flight
-- index, whatever the record says (a claim does not write it).
local function as_seen(id, raw)
  if not redis.call('ZSCORE', KEYS[2], id) then return raw end
  local st = cjson.decode(raw)
  st.state = 'in_flight'
  return cjson.encode(st)
end

-- Ends the notification's life in `state`, indexed by finish time in `index_key`.
local function finish(id, st, state, index_key, now)
  st.state = state
  st.next_at = nil
  st.finished_at = now
  redis.call('ZADD', index_key, now, id)
end

-- A schedule is kept as its intervals in ms, comma-separated ("15000,180000"): cheaper to
-- store and to carry through cjson than an array of numbers.
local function count_intervals(schedule)
  if schedule == '' then return 0 end
  local _, commas = string.gsub(schedule, ',', ',')
  return commas + 1
end

-- The `n`-th interval of the notification's schedule, in ms.
local function interval(st, n)
  local k = 0
  for ms in string.gmatch(st.schedule, '%d+') do
    k = k + 1
    if k == n then return tonumber(ms) end
  end
  return 0
end

-- Makes the notification due at `at`.
local function schedule_at(id, st, at)
  st.state = 'scheduled'
  st.next_at = at
  redis.call('ZADD', KEYS[1], at, id)
end

-- When a notification handed back is due again: when it was due, or now if that has
-- passed (a claim may take it before it is due).
local function due_again(st, now)
  return math.max(now, st.next_at or now)
end

-- Takes back an attempt that was never made or never completed, without counting it:
-- cancelled when a cancel was asked for meanwhile, otherwise due at `at`. True when it
-- is due again.
local function hand_back(id, st, now, at)
  redis.call('ZREM', KEYS[2], id)
  end_lease(st)
  if st.cancel_requested then
    finish(id, st, 'cancelled', KEYS[7], now)
    return false
  end
  schedule_at(id, st, at)
  return true
end

-- Tells the schedulers that this shard has a new earliest due notification: the message
-- is the shard's due key, so that a scheduler claims from that shard.
local function announce(channel)
  redis.call('PUBLISH', channel, KEYS[1])
end

-- Announces on `channel` when one of `due` (score/member pairs just added to the due
-- set) heads it now. True when it does.
local function announce_if_heads(channel, due)
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  for k = 2, #due, 2 do
    if due[k] == head then
      announce(channel)
      return true
    end
  end
  return false
end

-- Deletes every record of a notification that is in no index any more.
local function forget(id)
  redis.call('HDEL', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
end

-- Deletes `ids` from the finished index `key` with their records, counting them under
-- `counter` in the counters hash.
local function drop_all(key, ids, counter)
  for _, id in ipairs(ids) do
    redis.call('ZREM', key, id)
    forget(id)
  end
  if #ids > 0 then redis.call('HINCRBY', KEYS[8], counter, #ids) end
  return #ids
end

-- Retention of a finished index (dead or done, scored by finish time): deletes up to
-- `budget` members finished at or before `cutoff`, then, when `max_count` is given, the
-- oldest beyond it, within the same budget. Returns how many it deleted.
local function trim(key, name, cutoff, max_count, budget)
  local old = redis.call('ZRANGEBYSCORE', key, '-inf', cutoff, 'LIMIT', 0, budget)
  local n = drop_all(key, old, name .. '_by_age')
  if max_count and budget > n then
    local excess = math.min(redis.call('ZCARD', key) - max_count, budget - n)
    if excess > 0 then
      n = n + drop_all(key, redis.call('ZRANGE', key, 0, excess - 1), name .. '_by_count')
    end
  end
  return n
end

-- Applies the retention policy given as ARGV[first .. first + 2] (dead max age ms, dead
-- max count, finished max age ms) to the dead index when `dead` and to the finished index
-- when `finished`. Returns how many it deleted.
local function apply_retention(now, first, budget, dead, finished)
  local n = 0
  if dead then
    n = n + trim(KEYS[3], 'dead', now - tonumber(ARGV[first]), tonumber(ARGV[first + 1]), budget)
  end
  if finished then
    n = n + trim(KEYS[7], 'finished', now - tonumber(ARGV[first + 2]), nil, budget)
  end
  return n
end
