-- refresh: extend ARGV[3]'s lease to now + ARGV[4] ms, but only if it is still
-- live: an expired lease is lost even when nobody took the slot. ARGV[5] is
-- the refresher's id ('' for the process that took the slot): once another
-- process adopted the slot, only its refresher may keep it alive, so that
-- the slot runs out when the adopter dies, even while the adder lives on.
-- Returns {1, now ms} when extended, {0, now ms} when the slot is lost,
--         {2, now ms} when another process adopted it (not extended).
-- Fast path: still the short form with ARGV[3] its sole holder (so nobody
-- adopted its slot) and its lease not run out: extend it in place.
-- (held_alone, spelled out: the prelude's helpers come later.)
local short = redis.pcall('GET', holders)
if type(short) == 'string' then
  local kind_limit_fence, deadline, sole = string.match(short, '^(%d+ %d+ %d+) (%d+) (.*)$')
  local clock = sole == ARGV[3] and redis.call('TIME')
  local now = clock and tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  if now and tonumber(deadline) > now then
    redis.call('SET', holders, kind_limit_fence .. ' ' .. string.format('%d', now + tonumber(ARGV[4])) .. ' ' .. sole,
      'PX', ARGV[4])
    return {1, now}
  end
end
-- [rules]
local token, ttl_ms, refresher = ARGV[3], tonumber(ARGV[4]), ARGV[5]
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
