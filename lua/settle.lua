-- settle: write the outcome of attempts that postback worked out (src/lifecycle), each
-- only if the notification's stored record is still the one it was worked out from.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 wake channel, 2 dead max age ms, 3 dead max count, 4 finished max age ms,
--       5 retention budget, then per attempt 7 values (src/store/redis/settle.rs): id,
--       the record it was worked out from ('' when the caller has none), the record
--       after, the index it moves to ('done', 'dead' or 'due'), its score there, when the
--       attempt ended (ms), and the attempt's history entry (JSON)
-- No rules here. An attempt is written when its stored record is the expected one (a
-- notification with no record that is in flight has the one its registration gave it,
-- which is what its claim returned) and its end is not after now. Otherwise nothing is
-- written for it and the reply gives the stored record and whether it is in flight, so
-- that postback decides again; a notification with no record that is not in flight is
-- gone. The batch is read and written with one command per structure. Then retention,
-- in the indexes the batch added to: dead letters past their age or beyond their count,
-- and finished notifications past their age, are deleted and counted, at most the budget.
-- Returns {new earliest 0|1, number trimmed, now ms, then per attempt: 1 written, 0 gone,
-- or {stored record, in flight 0|1} to decide again}.
local FIRST, WIDTH = 6, 7
local now = now_ms(true)
local out = {0, 0, now}

local ids, states, flying = leased_batch(FIRST, WIDTH)
if #ids == 0 then return out end
local histories = redis.call('HMGET', KEYS[6], unpack(ids))

-- What the batch writes: field/value pairs for HSET, score/member pairs for ZADD.
local w = {state = {}, history = {}, settled = {}, done = {}, dead = {}, due = {}}
local seen = {}

-- The j-th attempt, its arguments from ARGV[i].
local function settle_one(j, i)
  local id = ids[j]
  if seen[id] then return 0 end
  local expected = ARGV[i + 1]
  local stored = states[j] or (flying[j] and expected ~= '' and expected)
  if stored ~= expected or tonumber(ARGV[i + 5]) > now then
    local in_flight = redis.call('ZSCORE', KEYS[2], id) and 1 or 0
    stored = states[j] or (in_flight == 1 and fresh_of(id))
    if not stored then return 0 end
    return {stored, in_flight}
  end
  seen[id] = true
  local h = histories[j]
  h = h and (string.sub(h, 1, -2) .. ',' .. ARGV[i + 6] .. ']') or ('[' .. ARGV[i + 6] .. ']')
  local target = w[ARGV[i + 3]]
  table.insert(w.history, id)
  table.insert(w.history, h)
  table.insert(w.settled, id)
  table.insert(target, ARGV[i + 4])
  table.insert(target, id)
  table.insert(w.state, id)
  table.insert(w.state, ARGV[i + 2])
  return 1
end

for j = 1, #ids do
  out[#out + 1] = settle_one(j, FIRST + (j - 1) * WIDTH)
end
if #w.settled > 0 then
  redis.call('HSET', KEYS[5], unpack(w.state))
  redis.call('HSET', KEYS[6], unpack(w.history))
  redis.call('ZREM', KEYS[2], unpack(w.settled))
end
for key, members in pairs({[KEYS[7]] = w.done, [KEYS[3]] = w.dead, [KEYS[1]] = w.due}) do
  if #members > 0 then redis.call('ZADD', key, unpack(members)) end
end
if #w.due > 0 and announce_if_heads(ARGV[1], w.due) then out[1] = 1 end
-- Retention where this batch added: an index it did not touch cannot have grown.
out[2] = apply_retention(now, 2, tonumber(ARGV[5]), #w.dead > 0, #w.done > 0)
return out
