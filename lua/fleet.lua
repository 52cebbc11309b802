-- fleet: the live instances sharing this Redis, and which of them owns each shard.
-- KEYS: 1 members (ZSET: instance id, scored by when its membership ends, ms),
--   2 owners (HASH: shard number -> instance id); both under the hash tag {<prefix>:fleet}
-- ARGV: 1 the calling instance's id, 2 how long its membership lasts from now, ms (0: it
--   is leaving), 3 number of shards, 4 the fleet channel
-- Renews (or ends) the caller's membership, forgets members whose membership ended, and
-- divides the shards among the live members: each keeps what it owns up to its share
-- (the number of shards over the number of members, one more for as many as the
-- remainder, those owning most first), and the rest go to members below their share.
-- So a joining member takes shards from the others, a leaving or dead one's are spread
-- over the rest, and nothing moves while the members stay the same. When membership or
-- ownership changed, publishes the caller's id on the fleet channel, so that every
-- instance asks again at once and learns its shards.
-- Returns {number of live members, ms until the first other member's membership ends
-- (-1: none), then the shards the caller owns}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local changed = false
if ttl > 0 then
  changed = redis.call('ZADD', KEYS[1], now + ttl, me) == 1
else
  changed = redis.call('ZREM', KEYS[1], me) == 1
end
-- Members whose membership ended are forgotten; the others' next end is reported.
local live, ended, next_end = {}, {}, -1
local scored = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #scored, 2 do
  local id, ends_in = scored[i], tonumber(scored[i + 1]) - now
  if ends_in <= 0 then
    ended[#ended + 1] = id
  else
    live[#live + 1] = id
    if id ~= me and (next_end < 0 or ends_in < next_end) then next_end = ends_in end
  end
end
if #ended > 0 then
  redis.call('ZREM', KEYS[1], unpack(ended))
  changed = true
end

local owners = {}
local flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do owners[tonumber(flat[i])] = flat[i + 1] end

-- Each live member's count of shards now, and its share.
local count = {}
for _, id in ipairs(live) do count[id] = 0 end
for s = 0, n - 1 do
  local o = owners[s]
  if o and count[o] then count[o] = count[o] + 1 end
end
table.sort(live, function(a, b)
  if count[a] ~= count[b] then return count[a] > count[b] end
  return a < b
end)
local share = {}
for i, id in ipairs(live) do
  share[id] = math.floor(n / #live) + ((i <= n % #live) and 1 or 0)
end

-- Who owns each shard now: its owner while within its share, else the first member
-- below its share.
local kept, assigned, orphans = {}, {}, {}
for _, id in ipairs(live) do kept[id] = 0 end
for s = 0, n - 1 do
  local o = owners[s]
  if o and share[o] and kept[o] < share[o] then
    kept[o] = kept[o] + 1
    assigned[s] = o
  else
    orphans[#orphans + 1] = s
  end
end
local k = 1
for _, s in ipairs(orphans) do
  while live[k] and kept[live[k]] >= share[live[k]] do k = k + 1 end
  local to = live[k]
  if to then
    kept[to] = kept[to] + 1
    assigned[s] = to
  end
end

local out = {#live, next_end}
for s = 0, n - 1 do
  local to = assigned[s]
  if to ~= owners[s] then
    changed = true
    if to then redis.call('HSET', KEYS[2], s, to) else redis.call('HDEL', KEYS[2], s) end
  end
  if to == me then out[#out + 1] = s end
end
if changed then redis.call('PUBLISH', ARGV[4], me) end
return out
