-- cancel: a waiter (or a wait() caller) gives up: timeout, interrupt. Leave
-- the queue, and if a slot was handed over meanwhile, pass it on.
-- Returns 1 if a handed-over slot was given back.
local token = ARGV[4]
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
return returned
