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

-- A schedule is kept as its intervals, each in the largest unit that divides it
-- ("15s,3m,1h"; a bare number is ms, as earlier builds kept every interval).
local function count_intervals(schedule)
  if schedule == '' then return 0 end
  local _, commas = string.gsub(schedule, ',', ',')
  return commas + 1
end

local UNIT_MS = {h = 3600000, m = 60000, s = 1000}

-- The `n`-th interval of the notification's schedule, in ms.
local function interval(st, n)
  local k = 0
  for digits, unit in string.gmatch(st.schedule, '(%d+)(%a?)') do
    k = k + 1
    if k == n then return tonumber(digits) * (UNIT_MS[unit] or 1) end
  end
  return 0
end

-- The state record of a notification as registered, as text (times as text). Built from
-- text rather than encoded with cjson: a registration costs 0.46x the instructions
-- (scripts/script_cost.py enqueue).
local max_attempts_of = {}
local function state_text(schedule, created_text, next_text)
  local max = max_attempts_of[schedule]
  if not max then
    max = string.format('%d', count_intervals(schedule) + 1)
    max_attempts_of[schedule] = max
  end
  return '{"state":"scheduled","attempts":0,"lease":0,"max_attempts":' .. max
    .. ',"schedule":"' .. schedule .. '","created_at":' .. created_text
    .. ',"next_at":' .. next_text .. '}'
end

-- True when `spec` starts with the line "<created_at> <delay> <schedule>"; a spec of an
-- earlier build is one JSON object ('{' first) and always came with a state record.
local function has_first_line(spec)
  return string.byte(spec, 1) ~= 123
end

-- A notification has no state record until it first changes after its registration
-- (an attempt settled, a deferral, a hand-back, a cancel), so that a pending one keeps a
-- single value in Redis. Until then its state is the one made here from its spec's first
-- line: due at created_at + delay, which is its score in the due set until something
-- writes a record. Nil for a spec of an earlier build.
local function fresh_state(spec)
  if not has_first_line(spec) then return nil end
  local first = string.find(spec, ' ', 1, true)
  local second = string.find(spec, ' ', first + 1, true)
  local line_end = string.find(spec, '\n', second, true)
  local created = string.sub(spec, 1, first - 1)
  local due = tonumber(created) + tonumber(string.sub(spec, first + 1, second - 1))
  return state_text(string.sub(spec, second + 1, line_end - 1), created, string.format('%d', due))
end

-- The state of a notification with no record yet, as text; nil when it has no spec.
local function fresh_of(id)
  local spec = redis.call('HGET', KEYS[4], id)
  return spec and fresh_state(spec) or nil
end

-- The state record of `id` (decoded, and as text), or nil: the stored one, or the one it
-- has from its registration.
local function load_state(id)
  local raw = redis.call('HGET', KEYS[5], id) or fresh_of(id)
  if not raw then return nil, nil end
  return cjson.decode(raw), raw
end

local function save_state(id, st)
  local encoded = cjson.encode(st)
  redis.call('HSET', KEYS[5], id, encoded)
  return encoded
end

-- A batch of leased notifications whose arguments start at ARGV[first], `width` each,
-- the id first and the lease second: their ids, their state records as stored, and,
-- when some have no record, which of them are in flight (fresh_state: one with no
-- record was claimed once, so it is in flight under lease 0; otherwise it is gone).
local function leased_batch(first, width)
  local ids = {}
  for i = first, #ARGV, width do table.insert(ids, ARGV[i]) end
  if #ids == 0 then return ids, {}, {} end
  local states = redis.call('HMGET', KEYS[5], unpack(ids))
  for j = 1, #ids do
    if not states[j] then return ids, states, redis.call('ZMSCORE', KEYS[2], unpack(ids)) end
  end
  return ids, states, {}
end

-- The decoded state of the batch's j-th notification (arguments from ARGV[i]) while the
-- caller still holds its lease, once per id in the batch (`seen` remembers); nil when
-- the lease is lost, the notification gone, or the id seen before. One with no record
-- that is in flight (`flying`, see leased_batch) has its registration's state: `known`,
-- when the caller has it as text, otherwise made from its spec. A claim does not write
-- the state record; instead the lease number goes up whenever the notification leaves
-- the in-flight index (`end_lease`), so a number that still matches is the caller's own
-- lease, still in flight.
local function held_state(ids, states, flying, seen, j, i, known)
  local id = ids[j]
  if seen[id] then return nil end
  local raw = states[j] or (flying[j] and (known or fresh_of(id)))
  if not raw then return nil end
  local st = cjson.decode(raw)
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
