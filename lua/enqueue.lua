-- enqueue: register a group of notifications and schedule each one's first attempt.
-- KEYS: the shard's keys (see common.lua), 11 the shard's shared schedules, then the
--       idempotency keys, tenants' pending indexes and ordering key lists of those that
--       have one
-- ARGV: 1 wake channel, then per notification
--       12 values: id, spec (what follows the schedule: the first line's last words,
--       tenant and ordering key, then the meta JSON and the body), schedule (as records keep it), its
--       reference ('' for none: kept once under it, if it can be), delay ms, the delay as
--       the first line writes it, index in KEYS of its idempotency key (0: none),
--       idempotency ttl ms, the fingerprint of its request, its tenant ('' for the default
--       one; counted in the tenants hash), index in KEYS of its ordering key's list (0:
--       none; behind another of its key, it waits: common.lua), index in KEYS of its
--       tenant's pending index (common.lua), where it is kept beside the due index
-- An idempotency key holds `<id> <fingerprint>` (keys of builds before fingerprints:
-- `<id>`). A notification whose idempotency key was seen before (earlier, or earlier in
-- this group) stores nothing: the first notification of that key is answered instead,
-- with the fingerprint kept (postback refuses the repeat when that says another
-- request: `Fingerprint::refuses`). The
-- group is written with one command per structure: the spec, with the registration's
-- time, delay and schedule in front, and the due time. No state record is written until
-- the notification first changes: until then its record is the one
-- lifecycle::transitions::register gives it from that first line.
-- Returns {0, or 1 + ms until due when one is the shard's new earliest, registration
-- time ms, then per notification: id, duplicate 0|1, for a duplicate the state of the
-- first (held_of in common.lua), or false when that one is in this group; for a new one,
-- 1 when it waits behind another of its ordering key, else false; and for a duplicate
-- the fingerprint kept with its key ('' for none)}.
local FIRST, WIDTH = 2, 12
if #ARGV < FIRST or (#ARGV - FIRST + 1) % WIDTH ~= 0 then
  return redis.error_reply('enqueue: ' .. #ARGV .. ' arguments are not records of ' .. WIDTH)
end
local now = now_ms(true)
-- Times go into the due set as text formatted here: Lua would format a number with
-- %.14g and Redis a number argument with %.17g, both through glibc's slow path, and
-- most of a group shares one due time. The first line has it in base 36.
local now_text = string.format('%d', now)
local function base36(n)
  local digits, s = '0123456789abcdefghijklmnopqrstuvwxyz', ''
  repeat
    local d = n % 36
    s = string.sub(digits, d + 1, d + 1) .. s
    n = (n - d) / 36
  until n == 0
  return s
end
local line_start = LAYOUT .. ' ' .. base36(now) .. ' '
local out = {0, now}
local w = {jobs = {}, due = {}, own = {}, names = {}}
local created = {}

-- The schedules the shard keeps once, by reference, as this call found or added them
-- (false: the reference holds another schedule, or the shard keeps as many as it may).
local shared = {}
local function schedule_word(text, reference)
  if reference == '' then return text end
  local kept = shared[reference]
  if kept == nil then
    kept = redis.call('HGET', KEYS[11], reference)
    if not kept and redis.call('HLEN', KEYS[11]) < MAX_SHARED_SCHEDULES then
      redis.call('HSET', KEYS[11], reference, text)
      kept = text
    end
    shared[reference] = kept or false
  end
  if kept == text then return '#' .. reference end
  return text
end

-- Every record's numbers are checked and every idempotency key read before anything is
-- written, so that a group this script refuses, or fails to read, is not half stored.
local seen, rewritten = {}, {}
for i = FIRST, #ARGV, WIDTH do
  local key, list = tonumber(ARGV[i + 6]), tonumber(ARGV[i + 10])
  if not (key and list and tonumber(ARGV[i + 11]) and tonumber(ARGV[i + 4])
      and tonumber(ARGV[i + 7])) then
    return redis.error_reply('enqueue: record ' .. ARGV[i] .. ' has a number that is not one')
  end
  if key > 0 and seen[key] == nil then seen[key] = redis.call('GET', KEYS[key]) or false end
end

for i = FIRST, #ARGV, WIDTH do
  local id, key = ARGV[i], tonumber(ARGV[i + 6])
  local fingerprint = ARGV[i + 8]
  local existing = key > 0 and seen[key]
  if existing then
    local first, kept = string.match(existing, '^(%S+) ?(%S*)$')
    local held = not created[first] and held_of(first)
    if not created[first] and not rewritten[key] then
      -- A write of its own, so that a WAIT behind this call (store.replica_acks)
      -- answers for the first registration too: replicas apply writes in order.
      redis.call('SET', KEYS[key], existing, 'KEEPTTL')
      rewritten[key] = true
    end
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = first, 1, held, kept
  else
    if key > 0 then
      seen[key] = id .. ' ' .. fingerprint
      redis.call('SET', KEYS[key], seen[key], 'PX', ARGV[i + 7])
    end
    local delay_ms = ARGV[i + 4]
    local next_text = delay_ms == '0' and now_text or string.format('%d', now + tonumber(delay_ms))
    local waits = false
    local list = tonumber(ARGV[i + 10])
    if list > 0 then
      next_text = join_order(KEYS[list], id, now + tonumber(delay_ms))
      waits = tonumber(next_text) >= WAITING and 1
    end
    created[id] = true
    local jobs, due = w.jobs, w.due
    local line = line_start .. ARGV[i + 5] .. ' ' .. schedule_word(ARGV[i + 2], ARGV[i + 3])
    jobs[#jobs + 1], jobs[#jobs + 2] = id, line .. ARGV[i + 1]
    due[#due + 1], due[#due + 2] = next_text, id
    local pending = KEYS[tonumber(ARGV[i + 11])]
    local own = w.own[pending] or {}
    own[#own + 1], own[#own + 2] = next_text, id
    w.own[pending] = own
    w.names[tenant_name(ARGV[i + 9])] = true
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = id, 0, waits, ''
    if ARGV[i + 9] ~= '' then tally(ARGV[i + 9], 'due', nil, 1, now) end
  end
end
flush_tally()

if #w.due > 0 then
  redis.call('HSET', KEYS[4], unpack(w.jobs))
  redis.call('ZADD', KEYS[1], unpack(w.due))
  for pending, own in pairs(w.own) do redis.call('ZADD', pending, unpack(own)) end
  local names = {}
  for name in pairs(w.names) do names[#names + 1] = name end
  redis.call('SADD', KEYS[10], unpack(names))
  local due_in = announce_if_heads(ARGV[1], w.due, now)
  if due_in then out[1] = 1 + due_in end
end
return out
