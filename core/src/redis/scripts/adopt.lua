-- adopt: another process takes over keeping ARGV[3]'s slot alive (a token
-- handed to a worker): its refresher ARGV[5] becomes the only one whose
-- refresh counts, and the lease is extended to now + ARGV[4] ms at once.
-- Returns {1, fence, deadline ms, now ms} when adopted,
--         {0, 0, 0, now ms} when the slot is gone (done, or run out) or
--         another process adopted it already,
--         {-1, kind, limit, now ms} when the name is not a WaitGroup of
--         this limit.
local token, ttl_ms, refresher = ARGV[3], tonumber(ARGV[4]), ARGV[5]
settle()
-- Only a WaitGroup of the name's own limit adopts: any other (or a Lock)
-- would refresh and count the slot by another rule.
if recorded_shape and recorded_shape ~= '2 ' .. ARGV[1] then
  local kind, recorded_limit = string.match(recorded_shape, '^(%d+) (%d+)$')
  return {-1, tonumber(kind), tonumber(recorded_limit), int(now_ms)}
end
purge_expired()
if not redis.call('ZSCORE', holders, token) then
  promote(nil)
  return {0, 0, 0, int(now_ms)}
end
-- A slot has one adopter: a second would leave the first healthy until its
-- next refresh, two workers on one slot.
local adopted_by = redis.call('HGET', owners, token)
if adopted_by and adopted_by ~= refresher then
  return {0, 0, 0, int(now_ms)}
end
redis.call('HSET', owners, token, refresher)
local deadline = take_up(token, ttl_ms)
return {1, redis.call('HGET', grants, token), int(deadline), int(now_ms)}
