-- trim: the periodic retention sweep, for when no settle has trimmed lately.
-- KEYS: the shard's keys (see common.lua)
-- ARGV: 1 dead max age ms, 2 dead max count, 3 finished max age ms, 4 budget (most
--       notifications deleted from each index by this call)
-- Deletes dead letters past their age or beyond their count and finished (delivered or
-- cancelled) notifications past their age, with their records, counting each.
-- Also deletes the tenants' window counts older than the last hour.
-- Returns the number deleted; a caller that gets a full budget back calls again.
local now = now_ms(false)
forget_old_windows(now)
return apply_retention(now, 1, tonumber(ARGV[4]), true, true)
