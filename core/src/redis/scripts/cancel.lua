-- cancel: a waiter (or a wait() caller) gives up: timeout, interrupt. Leave
-- the queue, and if a slot was handed over meanwhile, pass it on.
-- ARGV[3] token, ARGV[4] tombstone ms: when positive, an acquire of the
-- token still on its way (its caller gave up on it) is refused for that
-- long (acquire.lua).
-- Returns 1 if a handed-over slot was given back.
local token, tombstone_ms = ARGV[3], tonumber(ARGV[4])
settle()
purge_expired()
redis.call('ZREM', queue, token)
redis.call('HDEL', leases, token)
redis.call('HDEL', watchers, token)
redis.call('DEL', wake_prefix .. token)
local returned = redis.call('ZREM', holders, token)
if returned == 1 then end_grant(token, nil) end
redis.call('HDEL', bound, token)
forget_grants({token})
promote(nil)
if tombstone_ms > 0 then
  redis.call('SET', wake_prefix .. token .. ':gone', '1', 'PX', tombstone_ms)
end
return returned
