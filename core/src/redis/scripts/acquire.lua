-- acquire: take a slot for ARGV[3] if one is free and no live waiter is ahead;
-- otherwise queue it (unless ARGV[5] is 0: try once).
-- ARGV[3] token, ARGV[4] ttl ms, ARGV[5] waiter lease ms (0 = do not queue),
-- ARGV[6] handoff window ms, ARGV[7] the session binding of the grant (see
-- `bound` in the prelude; '' outside sessions), ARGV[8] the caller's kind
-- (1 lock, 2 WaitGroup).
-- Returns {1, fence, deadline ms, now ms} when granted,
--         {0, 0, earliest holder deadline (or end of a lock_delay) ms, now ms} when not, or
--         {-1, recorded kind, recorded limit, now ms} when the name is held or
--         awaited as another kind or with another limit.
-- Fast path: a name with no record at all (nobody holds, waits or watches
-- it, no lock_delay runs, no value was left behind) taken outside a
-- session, by a request its caller has not given up on. Its grant is the
-- short form (see `holders` in the prelude), which expires with the lease.
-- It runs before the prelude's helpers exist: read_clock and next_fence
-- are spelled out. The keys it uses beside holders (rules.lua names them
-- too) are named here.
if ARGV[7] == '' and redis.call('EXISTS', holders, prefix .. 'shape', prefix .. 'queue', prefix .. 'delay',
    prefix .. 'value', prefix .. 'watchers', prefix .. 'wake:' .. ARGV[3] .. ':gone') == 0 then
  local clock = redis.call('TIME')
  local seconds, micros = tonumber(clock[1]), tonumber(clock[2])
  local now_ms = seconds * 1000 + math.floor(micros / 1000)
  local ttl_ms = tonumber(ARGV[4])
  local fence_key = prefix .. 'fence'
  local fence = math.max(tonumber(redis.call('GET', fence_key) or '0') + 1, seconds * 1000000 + micros + tonumber(ARGV[2]))
  local fence_text = string.format('%d', fence)
  redis.call('SET', fence_key, fence_text, 'PX', string.format('%d', ttl_ms + 3600000))
  local deadline = now_ms + ttl_ms
  redis.call('SET', holders, ARGV[8] .. ' ' .. ARGV[1] .. ' ' .. fence_text .. ' ' .. string.format('%d', deadline)
    .. ' ' .. ARGV[3], 'PX', ARGV[4])
  return {1, fence, deadline, now_ms}
end
-- [rules]
local token, ttl_ms = ARGV[3], tonumber(ARGV[4])
local lease_ms, handoff_ms, binding_meta = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
settle()
purge_expired()
-- Its caller gave up on this request before it arrived (cancel.lua): it
-- must neither queue nor be granted, or it would hold the name for
-- nobody. The caller is gone: the answer goes unread.
if redis.call('EXISTS', wake_prefix .. token .. ':gone') == 1 then
  return {0, 0, int(now_ms), int(now_ms)}
end
local fence = redis.call('HGET', grants, token)
if fence then
  -- Handed to us while we were not listening (or the wake-up was lost with
  -- a dropped connection): claim it for a whole TTL, not the rest of its
  -- short handoff window.
  redis.call('DEL', wake_prefix .. token)
  local deadline = take_up(token, ttl_ms)
  return {1, fence, int(deadline), int(now_ms)}
end
-- The name is what its first holder or waiter said, until nobody holds or
-- waits for it: a client with another limit would overfill it, and a lock
-- and a WaitGroup of one name would share slots.
local shape = ARGV[8] .. ' ' .. ARGV[1]
forget_shape_if_idle()
if recorded_shape and recorded_shape ~= shape then
  local kind, limit = string.match(recorded_shape, '^(%d+) (%d+)$')
  return {-1, tonumber(kind), tonumber(limit), int(now_ms)}
end
if not recorded_shape then
  redis.call('SET', shape_key, shape)
  recorded_shape = shape
end
-- The name may have been idle with an older record: from now on it is ours.
limit = tonumber(ARGV[1])
expire_no_earlier(shape_key, math.max(ttl_ms, lease_ms, 1))
if binding_meta ~= '' then
  redis.call('HSET', bound, token, binding_meta)
  expire_no_earlier(bound, math.max(lease_ms, 1))
end
-- Uncontended: nobody queued, a slot free, no lock_delay running. Grant at
-- once, without the queue's bookkeeping.
if redis.call('ZCARD', queue) == 0 and redis.call('ZCARD', holders) < limit
    and redis.call('EXISTS', delay_key) == 0 then
  local granted_fence, deadline = grant(token, ttl_ms)
  return {1, int(granted_fence), int(deadline), int(now_ms)}
end
if not redis.call('ZSCORE', queue, token) then
  redis.call('ZADD', queue, int(now_us), token)
end
redis.call('HSET', leases, token,
  int(now_ms + math.max(lease_ms, 1)) .. ' ' .. int(ttl_ms) .. ' ' .. int(handoff_ms))
local admitted = promote(token)
if admitted then
  return {1, int(admitted[1]), int(admitted[2]), int(now_ms)}
end
if lease_ms == 0 then
  redis.call('ZREM', queue, token)
  redis.call('HDEL', leases, token)
  redis.call('HDEL', bound, token)
  forget_shape_if_idle()
else
  redis.call('PEXPIRE', queue, int(lease_ms))
  redis.call('PEXPIRE', leases, int(lease_ms))
end
-- When nobody holds it, a lock_delay is what the waiter waits out.
local earliest = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')[2]
  or now_ms + math.max(redis.call('PTTL', delay_key), 0)
return {0, 0, int(earliest), int(now_ms)}
