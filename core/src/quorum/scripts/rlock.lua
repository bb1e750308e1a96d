-- rlock: grant a read lock to ARGV[1] unless a writer holds the lock or a
-- writer is waiting for it (its mark keeps new readers out until it gets in).
-- KEYS[1] writer:  string, uid of the write holder
-- KEYS[2] readers: zset reader uid -> lease deadline (server ms)
-- KEYS[3] waiting: string, uid of a waiting writer (expires by itself)
-- KEYS[4] alive:   hash, the restart guard (guard.lua)
-- KEYS[5] nodes:   string, the holders' node-list fingerprint (guard.lua)
-- ARGV[1] uid, ARGV[2] ttl ms, ARGV[3] fingerprint
-- Returns {1, ''} when granted, {0, ''} when denied, {2, ''} while the node
-- recovers from a restart, {3, fingerprint} when the name's holders use
-- another node list.
local writer, readers, waiting = KEYS[1], KEYS[2], KEYS[3]
local uid, ttl_ms = ARGV[1], tonumber(ARGV[2])
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
if recovering(KEYS[4], now_ms, ttl_ms) then return {2, ''} end
local other = other_list(KEYS[5], ARGV[3])
if other then return {3, other} end
redis.call('ZREMRANGEBYSCORE', readers, '-inf', now_ms)
if redis.call('EXISTS', writer) == 1 or redis.call('EXISTS', waiting) == 1 then
  return {0, ''}
end
redis.call('ZADD', readers, now_ms + ttl_ms, uid)
record_list(KEYS[5], ARGV[3], ttl_ms)
-- The set lives as long as its longest lease, so crashed readers leave nothing.
local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')[2]
redis.call('PEXPIREAT', readers, last + 1)
return {1, ''}
