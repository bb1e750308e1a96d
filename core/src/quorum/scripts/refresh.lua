-- refresh: extend the lease of ARGV[1] to now + ARGV[2] ms, only if it is
-- still live: a lease that ran out is lost even if nobody took the lock.
-- KEYS[1] writer:  string, uid of the write holder
-- KEYS[2] readers: zset reader uid -> lease deadline (server ms)
-- KEYS[3] alive:   hash, the restart guard (guard.lua): a node that lost
--                  our grant learns how long a lease it may have forgotten
-- KEYS[4] nodes:   string, the holders' node-list fingerprint, kept as
--                  long as the grant
-- ARGV[1] uid, ARGV[2] ttl ms, ARGV[3] "write" or "read"
-- Returns 1 when extended, 0 when the grant is gone.
local writer, readers = KEYS[1], KEYS[2]
local uid, ttl_ms, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
recovering(KEYS[3], now_ms, ttl_ms)
if mode == 'write' then
  if redis.call('GET', writer) ~= uid then return 0 end
  redis.call('PEXPIRE', writer, ttl_ms)
  redis.call('PEXPIRE', KEYS[4], ttl_ms, 'GT')
  return 1
end
local deadline = redis.call('ZSCORE', readers, uid)
if not deadline or tonumber(deadline) <= now_ms then return 0 end
redis.call('ZADD', readers, 'XX', now_ms + ttl_ms, uid)
local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', readers, last + 1)
redis.call('PEXPIRE', KEYS[4], ttl_ms, 'GT')
return 1
