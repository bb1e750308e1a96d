-- cancel: a waiter gives up (timeout, interrupt). Leave the queue, and if a
-- slot was handed over in the meantime, give it to the next waiter.
-- Returns 1 if a handed-over slot was given back.
local token = ARGV[3]
purge_expired()
redis.call('ZREM', queue, token)
redis.call('HDEL', leases, token)
redis.call('DEL', wake_prefix .. token)
local returned = redis.call('ZREM', holders, token)
redis.call('HDEL', grants, token)
promote(nil)
return returned
