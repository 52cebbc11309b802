-- replace_key: keep an idempotency key at a shard its registration was moved off, only
-- if it still holds what was read (so that of two repeats taking it over at once, one
-- wins and the other meets it).
-- KEYS[1]: the key. ARGV: what it was read to hold ('' for nothing), its new value ('' to
-- forget it), and how long it is kept (ms).
-- Returns 1 if it was written, 0 if it held something else.
local held = redis.call('GET', KEYS[1])
if (held or '') ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
