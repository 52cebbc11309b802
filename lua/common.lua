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

-- True when `spec` starts with a registration line ("v2 <created_at> <delay> <schedule>",
-- or without the "v2 " as builds up to 2026-11-23 wrote it; src/store/spec.rs); a spec
-- of an earlier build is one JSON object ('{' first) and always came with a state record.
local function has_first_line(spec)
  return string.byte(spec, 1) ~= 123
end

-- The indexes, by the names postback gives them (lifecycle::Index::name).
local INDEX = {due = KEYS[1], inflight = KEYS[2], dead = KEYS[3], done = KEYS[7]}

-- The index that holds `id` and its score there, or nil.
local function index_of(id)
  for name, key in pairs(INDEX) do
    local score = redis.call('ZSCORE', key, id)
    if score then return name, score end
  end
  return nil, nil
end

-- How `id` is now, for postback to work a change out from: {its state record, or false
-- when it has none yet; its spec when it has no record (postback makes the record its
-- registration gave it from the spec's first line), otherwise false; the index that
-- holds it ('' for none: it is gone); its score there (false for none)}.
local function held_of(id)
  local record = redis.call('HGET', KEYS[5], id)
  local spec = not record and redis.call('HGET', KEYS[4], id)
  local index, score = index_of(id)
  return {record or false, spec or false, index or '', score or false}
end

-- Tells the schedulers on `channel` when one of `due` (score/member pairs just added to
-- the due set) heads it now: the message is the shard's due key, so that a scheduler
-- claims from that shard. True when it does.
local function announce_if_heads(channel, due)
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  for k = 2, #due, 2 do
    if due[k] == head then
      redis.call('PUBLISH', channel, KEYS[1])
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
