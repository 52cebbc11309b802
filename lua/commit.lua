-- commit: write the changes postback worked out (src/lifecycle) for a batch of
-- notifications, each only if the notification is still as it was when it was worked
-- out: its stored record the expected one, in the expected index. No rules here but an
-- ordering key's turn (below): a settle, deferral, release, hand-back of an expired
-- lease, cancel, replay, resend and attempt-now all come this way (src/store/redis_store/commit.rs builds the
-- arguments).
-- KEYS: the shard's keys (see common.lua), then the tenants' own indexes (groups of three,
--       common.lua) and the ordering key lists of those that have one
-- ARGV: 1 wake channel, 2 the number of tenant groups, then each group's values
--       (common.lua, `read_groups`), then per notification 12 values: id, the record it
--       was worked out from ('' when the caller has none: only the answer is wanted),
--       the index it was in ('due', 'inflight', 'dead' or 'done'), a time in ms the
--       change assumes Redis has reached (0: none), the new record, the index it moves
--       to ('' when it stays where it is), its score there, an entry for its history
--       (an attempt or a note, JSON; '' for none), a new spec ('' keeps it), the index in
--       KEYS of its tenant's group (0: none, for one only asked about; a move is kept in
--       the tenant's own indexes and counted in the tenants hash), the index in KEYS of
--       its ordering key's list (0: none), and its score in the index it was in (unused
--       in flight)
-- A notification of an ordering key that finishes (moves from due or in flight to dead
-- or done) leaves its key's list, and if it was first the next takes its turn; a replay
-- or resend (from dead or done) joins the back, and waits there behind any other
-- (common.lua; the rule is lifecycle's `Index::joins_order`).
-- A notification cannot leave the in-flight index without its record changing, so there
-- the record alone tells (one claimed once and never changed has none, and still has
-- none); in another index it is also asked whether it is still there. Otherwise
-- nothing is written for it, and the reply says how it is now, for postback to work the
-- change out again; one that is as expected but assumes a time Redis has not reached (an
-- attempt's end reckoned ahead of its clock) is answered 2, to be worked out again from
-- the same state at Redis's time.
-- Then retention of each tenant the batch moved some into its dead or done index, in
-- those indexes, at most its group's budget.
-- Returns {0, or 1 + ms until due when one is the shard's new earliest, number trimmed,
-- now µs, then per notification: 1 written, 2 unchanged but ahead of now, or its state
-- now (see held_of in common.lua)}.
local groups, FIRST = read_groups(2)
local WIDTH = 12
if (#ARGV - FIRST + 1) % WIDTH ~= 0 then
  return redis.error_reply('commit: ' .. #ARGV .. ' arguments are not records of ' .. WIDTH)
end
local time_us = now_us()
local now = math.ceil(time_us / 1000)
local out = {0, 0, time_us}

local ids = {}
for i = FIRST, #ARGV, WIDTH do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return out end
local states = redis.call('HMGET', KEYS[5], unpack(ids))

-- Whether the j-th notification (arguments from ARGV[i]) is as the change expects: its
-- score in the index it is in (true in flight), or false. A notification leaves the
-- in-flight index only by a change that writes its record, so there an unchanged record
-- (or still none, for one claimed once) is enough; in another index a claim may have
-- moved it, or its ordering key's turn moved its score, without writing its record, so
-- the index is asked for the score the change was worked out at.
local function unchanged(j, i)
  local expected, from = ARGV[i + 1], ARGV[i + 2]
  if expected == '' then return false end
  local stored = states[j]
  if stored and stored ~= expected then return false end
  if from == 'inflight' then return true end
  local score = redis.call('ZSCORE', INDEX[from], ids[j])
  if not score or tonumber(score) ~= tonumber(ARGV[i + 11]) then return false end
  return score
end

-- What the batch writes: field/value pairs for HSET, members for ZREM by key, and
-- score/member pairs for ZADD by key (the shard's indexes and the tenants' own).
-- `turns`: score/member pairs of those whose turn in their ordering key came;
-- `touched`: per group, whether it moved some into its dead and its done index.
local w = {state = {}, jobs = {}, entries = {}, leave = {}, enter = {}, turns = {},
  touched = {}}
local seen = {}

local function add_to(list, key, ...)
  local members = list[key]
  if not members then
    members = {}
    list[key] = members
  end
  for _, v in ipairs({...}) do members[#members + 1] = v end
end

-- Moves `id` `from` one index `to` another at `at`, with its tenant's own entry (group
-- `g`): in a tenant's pending index a move between due and in flight only sets its score.
local function move(g, id, from, to, at)
  add_to(w.leave, INDEX[from], id)
  add_to(w.enter, INDEX[to], at, id)
  if g == 0 then return end
  local own_from, own_to = own_key(g, from), own_key(g, to)
  if own_from ~= own_to then add_to(w.leave, own_from, id) end
  add_to(w.enter, own_to, at, id)
  local touched = w.touched[g] or {}
  touched[to] = true
  w.touched[g] = touched
end

-- Keeps the ordering key's list of a notification moving `from` one index `to` another
-- (arguments from ARGV[i]; its group `g`). Its score in `to`.
local function reorder(i, g, id, from, to)
  local list, at = tonumber(ARGV[i + 10]), ARGV[i + 6]
  if list == 0 then return at end
  if (to == 'dead' or to == 'done') and (from == 'due' or from == 'inflight') then
    local turn = leave_order(KEYS[list], id, now, g > 0 and own_key(g, 'due'))
    if turn[1] then w.turns[#w.turns + 1], w.turns[#w.turns + 2] = turn[1], turn[2] end
  elseif (from == 'dead' or from == 'done') and to == 'due' then
    return join_order(KEYS[list], id, tonumber(at))
  end
  return at
end

local function commit_one(j, i)
  local id = ids[j]
  local score = not seen[id] and unchanged(j, i)
  if not score then return held_of(id) end
  if tonumber(ARGV[i + 3]) > now then return 2 end
  seen[id] = true
  if ARGV[i + 5] ~= '' then
    local from, to, g = ARGV[i + 2], ARGV[i + 5], tonumber(ARGV[i + 9])
    local at = reorder(i, g, id, from, to)
    move(g, id, from, to, at)
    -- Only a tenant counted apart pays for reading the scores.
    local tenant = g > 0 and groups[g].tenant or ''
    if tenant ~= '' then
      tally(tenant, from, tonumber(score), -1, now)
      tally(tenant, to, tonumber(at), 1, now)
    end
  end
  w.state[#w.state + 1], w.state[#w.state + 2] = id, ARGV[i + 4]
  if ARGV[i + 7] ~= '' then w.entries[#w.entries + 1] = {id, ARGV[i + 7]} end
  if ARGV[i + 8] ~= '' then w.jobs[#w.jobs + 1], w.jobs[#w.jobs + 2] = id, ARGV[i + 8] end
  return 1
end

for j = 1, #ids do
  out[#out + 1] = commit_one(j, FIRST + (j - 1) * WIDTH)
end

-- Each history is a JSON array: the entry goes before its closing bracket.
if #w.entries > 0 then
  local hids = {}
  for k, e in ipairs(w.entries) do hids[k] = e[1] end
  local histories = redis.call('HMGET', KEYS[6], unpack(hids))
  local pairs_out = {}
  for k, e in ipairs(w.entries) do
    local h = histories[k]
    h = h and (string.sub(h, 1, -2) .. ',' .. e[2] .. ']') or ('[' .. e[2] .. ']')
    pairs_out[#pairs_out + 1], pairs_out[#pairs_out + 2] = e[1], h
  end
  redis.call('HSET', KEYS[6], unpack(pairs_out))
end
if #w.state > 0 then redis.call('HSET', KEYS[5], unpack(w.state)) end
if #w.jobs > 0 then redis.call('HSET', KEYS[4], unpack(w.jobs)) end
for key, members in pairs(w.leave) do
  redis.call('ZREM', key, unpack(members))
end
for key, members in pairs(w.enter) do
  redis.call('ZADD', key, unpack(members))
end
for _, fresh in ipairs({w.enter[KEYS[1]] or {}, w.turns}) do
  local due_in = #fresh > 0 and announce_if_heads(ARGV[1], fresh, now)
  if due_in and (out[1] == 0 or 1 + due_in < out[1]) then out[1] = 1 + due_in end
end
flush_tally()
-- Ages counted from the time rounded down, as the sweep (trim.lua) and every store do.
for g, touched in pairs(w.touched) do
  out[2] = out[2] + apply_retention(math.floor(time_us / 1000), g, groups[g], touched.dead,
    touched.done)
end
return out
