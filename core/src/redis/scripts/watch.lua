-- watch: for wait(): 1 if no slot is held now; otherwise register ARGV[3]
-- as a watcher for ARGV[4] ms, to be woken with 'idle' on its wake list
-- when the last slot frees, and return 0.
local token, lease_ms = ARGV[3], tonumber(ARGV[4])
settle()
purge_expired()
promote(nil)
if redis.call('ZCARD', holders) == 0 then
  redis.call('HDEL', watchers, token)
  return 1
end
redis.call('HSET', watchers, token, int(now_ms + lease_ms))
redis.call('PEXPIRE', watchers, int(lease_ms))
return 0
