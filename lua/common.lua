-- Helpers put in front of every script by src/store/redis_store.rs, after the constants
-- it writes from Rust's (`script_constants`: LAYOUT, WAITING, HELD, WINDOW_MS, WINDOWS,
-- MAX_SHARED_SCHEDULES, DEFAULT_TENANT), so that no script has a number or a format of
-- its own. Every script receives the shard's keys in this order: KEYS 1 due, 2 inflight,
-- 3 dead, 4 jobs, 5 state, 6 history, 7 done, 8 counters, 9 tenants, 10 tenant_names
-- (then its own extra keys).

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

-- True when `spec` starts with a registration line ("v3 <created_at> <delay> <schedule>",
-- or as earlier builds wrote it, "v2 …" or with no version; src/store/spec.rs); a spec
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

-- What a spec says of its notification besides its content: {its tenant ('' for the
-- default one), its ordering key ('' for none)}. Since layout 4 (src/store/spec.rs)
-- they are the fifth and sixth words of the first line, split at each single space as
-- `spec::words` splits it (an empty schedule, one attempt only, is an empty word),
-- which postback writes from validated values (neither holds a space):
-- `<LAYOUT> <created> <delay> <schedule>[ <tenant>[ <key>]]`.
-- Nothing is looked for inside the meta JSON or the body, which callers wrote.
local function about(spec)
  if not spec or not has_first_line(spec) then return '', '' end
  local line_end = string.find(spec, '\n', 1, true)
  if not line_end then return '', '' end
  local line = string.sub(spec, 1, line_end - 1)
  if string.sub(line, 1, #LAYOUT + 1) == LAYOUT .. ' ' then
    local words = {}
    for word in string.gmatch(line .. ' ', '([^ ]*) ') do words[#words + 1] = word end
    return words[5] or '', words[6] or ''
  end
  -- A spec of an earlier layout: postback wrote the ordering key and the tenant as the
  -- last fields of the meta line, so only the end of that line is read, where no value
  -- a caller wrote can stand (its strings' quotes are escaped, its objects end in '}}').
  local meta_end = string.find(spec, '\n', line_end + 1, true)
  if not meta_end then return '', '' end
  local tail = string.sub(spec, math.max(line_end + 1, meta_end - 320), meta_end - 1)
  local tenant = string.match(tail, ',"tenant":"([%w%-_%.]+)"}$') or ''
  if tenant == 'default' then tenant = '' end
  local key = string.match(tail, ',"ordering_key":"([^"]+)","tenant":"[%w%-_%.]+"}$')
    or string.match(tail, ',"ordering_key":"([^"]+)"}$') or ''
  return tenant, key
end

-- The tenant `spec` names, '' for the default one.
local function tenant_of(spec)
  return (about(spec))
end

-- How `id` is now, for postback to work a change out from: {its state record, or false
-- when it has none yet; its spec when it has no record (postback makes the record its
-- registration gave it from the spec's first line), otherwise false; the index that
-- holds it ('' for none: it is gone); its score there (false for none); its tenant
-- ('' for the default one); its ordering key ('' for none)}.
local function held_of(id)
  local record = redis.call('HGET', KEYS[5], id)
  local spec = redis.call('HGET', KEYS[4], id)
  local index, score = index_of(id)
  local tenant, key = about(spec)
  return {record or false, not record and spec or false, index or '', score or false,
    tenant, key}
end

-- Tenants' own indexes (lifecycle::TenantIndex): each tenant's notifications in the
-- shard, in its `pending` (scheduled or in flight, scored as in the due index; in flight,
-- at the time it came due: a claim leaves them as they are), `dead` and `done` indexes,
-- which its lists and its retention read. A script is given the tenants whose
-- notifications it moves as groups: the three keys of each, consecutive in KEYS from its
-- pending one, and in ARGV (`read_groups`) that key's index in KEYS, the tenant's name as
-- the counts per tenant know it ('' for the default one), its retention budget in this
-- call (0: none) and its limits (dead max age ms, dead max count, finished max age ms).
local OWN = {due = 0, inflight = 0, dead = 1, done = 2}
local GROUP_WIDTH = 6

-- The key of group `g`'s own index that mirrors the shard's index `index`.
local function own_key(g, index)
  return KEYS[g + OWN[index]]
end

-- The groups given from ARGV[first] (their number, then each one's values), by the index
-- in KEYS of their pending key; and where the arguments after them start.
local function read_groups(first)
  local n, groups = tonumber(ARGV[first]), {}
  for i = first + 1, first + n * GROUP_WIDTH, GROUP_WIDTH do
    groups[tonumber(ARGV[i])] = {tenant = ARGV[i + 1], budget = tonumber(ARGV[i + 2]),
      dead_age = tonumber(ARGV[i + 3]), dead_count = tonumber(ARGV[i + 4]),
      done_age = tonumber(ARGV[i + 5])}
  end
  return groups, first + 1 + n * GROUP_WIDTH
end

-- The name a tenant is kept under in the shard's tenant_names (KEYS[10]).
local function tenant_name(counted)
  if counted == '' then return DEFAULT_TENANT end
  return counted
end

-- Ordering keys: each key's notifications in registration order, in the shard's list
-- `order:<key>`. Only the first is in the due index at its own time; the others are
-- there WAITING later (lifecycle::WAITING_OFFSET_MS), where no claim reaches them,
-- until their turn. Scores are written with '%d': Lua would format them with %.14g.

-- Puts `id`, due at `due` (ms), at the back of the ordering key's list `list`. Its
-- score in the due index, as text: `due`, or WAITING later behind another.
local function join_order(list, id, due)
  if redis.call('RPUSH', list, id) > 1 then due = due + WAITING end
  return string.format('%d', due)
end

-- Takes `id` out of the ordering key's list `list`. When it was first, the next one
-- waiting takes its turn: due at its own time, or `now` if that has passed, in the due
-- index and in its tenant's `pending` (the key's tenant is `id`'s). Returns {score, id}
-- of the one whose turn it is now, or an empty table.
local function leave_order(list, id, now, pending)
  if redis.call('LINDEX', list, 0) ~= id then
    redis.call('LREM', list, 1, id)
    return {}
  end
  redis.call('LPOP', list)
  -- Every notification leaves the list as it leaves the due and in-flight indexes;
  -- one found in neither (a list edited by hand) is passed over, a bounded few per call.
  for _ = 1, 16 do
    local next_id = redis.call('LINDEX', list, 0)
    if not next_id then return {} end
    local score = tonumber(redis.call('ZSCORE', KEYS[1], next_id))
    if score and score < WAITING then return {} end
    if score then
      local due = string.format('%d', math.max(score - WAITING, now))
      redis.call('ZADD', KEYS[1], due, next_id)
      if pending then redis.call('ZADD', pending, due, next_id) end
      return {due, next_id}
    end
    if redis.call('ZSCORE', KEYS[2], next_id) then return {} end
    redis.call('LPOP', list)
  end
  return {}
end

-- Counts per tenant, in the tenants hash (KEYS[9]), for every tenant but the default
-- one, whose counts are the shard's totals less these (src/store/tenant_counts.rs):
-- `<tenant> <index>` notifications in each index; `<tenant> <index>@<window>` those in
-- dead and done by the five-minute window of their finish time, for the last hour
-- (trim.lua deletes older windows); `<tenant> <counter>` what retention deleted.
-- A script adds its changes up with `tally` and writes them with `flush_tally`.
local tallied = {}

local function tally(tenant, index, score, by, now)
  if tenant == '' then return end
  local field = tenant .. ' ' .. index
  tallied[field] = (tallied[field] or 0) + by
  if score and (index == 'dead' or index == 'done') then
    local window = math.floor(score / WINDOW_MS)
    if window > math.floor(now / WINDOW_MS) - WINDOWS then
      local f = string.format('%s@%d', field, window)
      tallied[f] = (tallied[f] or 0) + by
    end
  end
end

local function flush_tally()
  for field, by in pairs(tallied) do
    if by ~= 0 then redis.call('HINCRBY', KEYS[9], field, by) end
  end
  tallied = {}
end

-- Whether any tenant but the default one has notifications counted in this shard: only
-- then do scripts read a notification's tenant from its spec.
local function has_tenants()
  return redis.call('EXISTS', KEYS[9]) == 1
end

-- Deletes the window counts older than the last hour.
local function forget_old_windows(now)
  local oldest = math.floor(now / WINDOW_MS) - WINDOWS
  for _, field in ipairs(redis.call('HKEYS', KEYS[9])) do
    local window = tonumber(string.match(field, '@(%d+)$'))
    if window and window <= oldest then redis.call('HDEL', KEYS[9], field) end
  end
end

-- Tells the schedulers on `channel` when one of `due` (score/member pairs just added to
-- the due set) heads it now: the message is the shard's due key and the ms from `now`
-- until it is due, so that a scheduler claims from that shard then. Returns those ms
-- (nil when none heads it).
local function announce_if_heads(channel, due, now)
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  for k = 2, #due, 2 do
    if due[k] == head and tonumber(due[k - 1]) < HELD then
      local due_in = math.max(0, tonumber(due[k - 1]) - now)
      redis.call('PUBLISH', channel, KEYS[1] .. ' ' .. string.format('%d', due_in))
      return due_in
    end
  end
  return nil
end

-- Deletes every record of a notification that is in no index any more.
local function forget(id)
  redis.call('HDEL', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
end

-- Deletes `ids`, read from group `g`'s own finished index (dead or done), from it and
-- from the shard's `index`, with their records, counting them under `counter` in the
-- counters hash, and per tenant. Only one the shard's index still holds is deleted and
-- counted: an entry of the tenant's index that no longer matches (kept by a build that
-- knew no tenant indexes) is dropped alone. Returns how many it deleted.
local function drop_all(g, tenant, index, ids, counter, now)
  if #ids == 0 then return 0 end
  local key, gone = INDEX[index], {}
  local scores = redis.call('ZMSCORE', key, unpack(ids))
  for k, id in ipairs(ids) do
    if scores[k] then
      if tenant ~= '' then
        tally(tenant, index, tonumber(scores[k]), -1, now)
        tally(tenant, counter, nil, 1, now)
      end
      forget(id)
      gone[#gone + 1] = id
    end
  end
  redis.call('ZREM', own_key(g, index), unpack(ids))
  if #gone > 0 then
    redis.call('ZREM', key, unpack(gone))
    redis.call('HINCRBY', KEYS[8], counter, #gone)
  end
  return #gone
end

-- Retention of group `g`'s finished index `index` (dead or done, scored by finish time):
-- deletes up to `budget` of its members finished at or before `cutoff`, then, when
-- `max_count` is given, its oldest beyond it, within the same budget; `name` names the
-- counters. Returns how many it deleted.
local function trim(g, tenant, index, name, now, cutoff, max_count, budget)
  local own = own_key(g, index)
  local old = redis.call('ZRANGEBYSCORE', own, '-inf', cutoff, 'LIMIT', 0, budget)
  local n = drop_all(g, tenant, index, old, name .. '_by_age', now)
  if max_count and budget > n then
    local excess = math.min(redis.call('ZCARD', own) - max_count, budget - n)
    if excess > 0 then
      local oldest = redis.call('ZRANGE', own, 0, excess - 1)
      n = n + drop_all(g, tenant, index, oldest, name .. '_by_count', now)
    end
  end
  return n
end

-- Applies group `g`'s retention (`group`, as read_groups reads it) to its dead letters
-- when `dead` and to its finished notifications when `finished`, within its budget for
-- each. Returns how many it deleted.
local function apply_retention(now, g, group, dead, finished)
  local n = 0
  if group.budget > 0 and dead then
    n = n + trim(g, group.tenant, 'dead', 'dead', now, now - group.dead_age, group.dead_count,
      group.budget)
  end
  if group.budget > 0 and finished then
    n = n + trim(g, group.tenant, 'done', 'finished', now, now - group.done_age, nil, group.budget)
  end
  flush_tally()
  return n
end
