-- refresh: extend ARGV[3]'s lease to now + ARGV[4] ms, but only if it is still
-- live: an expired lease is lost even when nobody took the slot.
-- Returns {1, now ms} when extended, {0, now ms} when the slot is lost.
local token, ttl_ms = ARGV[3], tonumber(ARGV[4])
purge_expired()
if not redis.call('ZSCORE', holders, token) then
  promote(nil)
  return {0, int(now_ms)}
end
take_up(token, ttl_ms)
return {1, int(now_ms)}
