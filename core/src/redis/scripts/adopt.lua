-- adopt: another process takes over keeping ARGV[3]'s slot alive (a token
-- handed to a worker): its refresher ARGV[5] becomes the only one whose
-- refresh counts, and the lease is extended to now + ARGV[4] ms at once.
-- Returns {1, fence, deadline ms, now ms} when adopted,
--         {0, 0, 0, now ms} when the slot is gone (done, or run out).
local token, ttl_ms, refresher = ARGV[3], tonumber(ARGV[4]), ARGV[5]
purge_expired()
if not redis.call('ZSCORE', holders, token) then
  promote(nil)
  return {0, 0, 0, int(now_ms)}
end
redis.call('HSET', owners, token, refresher)
local deadline = take_up(token, ttl_ms)
return {1, redis.call('HGET', grants, token), int(deadline), int(now_ms)}
