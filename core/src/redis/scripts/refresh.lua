-- refresh: extend ARGV[3]'s lease to now + ARGV[4] ms, but only if it is still
-- live: an expired lease is lost even when nobody took the slot. ARGV[5] is
-- the refresher's id ('' for the process that took the slot): once another
-- process adopted the slot, only its refresher may keep it alive, so that
-- the slot runs out when the adopter dies, even while the adder lives on.
-- Returns {1, now ms} when extended, {0, now ms} when the slot is lost,
--         {2, now ms} when another process adopted it (not extended).
local token, ttl_ms, refresher = ARGV[3], tonumber(ARGV[4]), ARGV[5]
-- Fast path: still the short form with `token` its sole holder (so nobody
-- adopted its slot): extend it in place.
local kind_limit, fence = held_alone(token)
if kind_limit then
  redis.call('SET', holders, kind_limit .. ' ' .. fence .. ' ' .. int(now_ms + ttl_ms) .. ' ' .. token,
    'PX', ARGV[4])
  return {1, now_ms}
end
-- [rules]
settle()
purge_expired()
if not redis.call('ZSCORE', holders, token) then
  promote(nil)
  return {0, int(now_ms)}
end
local owner = redis.call('HGET', owners, token)
if owner and owner ~= refresher then
  return {2, int(now_ms)}
end
take_up(token, ttl_ms)
return {1, int(now_ms)}
