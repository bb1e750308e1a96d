-- refresh: extend ARGV[3]'s lease to now + ARGV[4] ms, but only if it is still
-- live: an expired lease is lost even when nobody took the slot.
-- Returns {1, now ms} when extended, {0, now ms} when the slot is lost.
local token, ttl_ms = ARGV[3], tonumber(ARGV[4])
purge_expired()
if not redis.call('ZSCORE', holders, token) then
  promote(nil)
  return {0, int(now_ms)}
end
redis.call('ZADD', holders, 'XX', int(now_ms + ttl_ms), token)
expire_with_last(holders, holders)
expire_with_last(grants, holders)
local b = binding(token)
if b then keep_bound(b, ttl_ms) end
return {1, int(now_ms)}
