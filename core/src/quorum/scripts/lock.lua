-- lock: grant the write lock to ARGV[1] if nobody holds it, neither a writer
-- nor a reader. While readers hold it, leave a short-lived "writer waiting"
-- mark that new readers respect, so a stream of readers cannot starve writers.
-- KEYS[1] writer:  string, uid of the write holder, expires with its lease
-- KEYS[2] readers: zset reader uid -> lease deadline (server ms)
-- KEYS[3] waiting: string, a waiting writer, expires after ARGV[4] ms
-- KEYS[4] fence:   string, the last fencing value this node issued or
--                  sealed, for every name; never expires (quorum/engine.rs)
-- KEYS[5] legacy:  string, the name's own last value as versions before
--                  KEYS[4] kept it; counted while it lives (it expires)
-- KEYS[6] alive:   hash, the restart guard (guard.lua)
-- KEYS[7] nodes:   string, the holders' node-list fingerprint (guard.lua)
-- ARGV[1] uid of this attempt, ARGV[2] waiter (the holder, same across its
-- attempts), ARGV[3] ttl ms, ARGV[4] waiting-mark ms, ARGV[5] fingerprint
-- Returns {1, fence} when granted, {0, ''} when denied, {2, ''} while the
-- node recovers from a restart, {3, fingerprint} when the name's holders
-- use another node list.
-- Deadlines come from this server's clock, never from a client's.
local writer, readers, waiting, fence_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local uid, waiter, ttl_ms, waiting_ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
if recovering(KEYS[6], now_ms, ttl_ms) then return {2, ''} end
local other = other_list(KEYS[7], ARGV[5])
if other then return {3, other} end
redis.call('ZREMRANGEBYSCORE', readers, '-inf', now_ms)
-- Our own grant (a request repeated after a dropped connection) is granted again.
local holder = redis.call('GET', writer)
if (holder and holder ~= uid) or redis.call('ZCARD', readers) > 0 then
  redis.call('SET', waiting, waiter, 'PX', waiting_ms)
  return {0, ''}
end
redis.call('SET', writer, uid, 'PX', ttl_ms)
record_list(KEYS[7], ARGV[5], ttl_ms)
if redis.call('GET', waiting) == waiter then redis.call('DEL', waiting) end
-- Seeded from server time, so values keep increasing even after Redis
-- restarted without persistence.
local last = math.max(tonumber(redis.call('GET', fence_key) or '0'),
  tonumber(redis.call('GET', KEYS[5]) or '0'))
local fence = math.max(last + 1, now_us)
redis.call('SET', fence_key, string.format('%.0f', fence))
return {1, string.format('%.0f', fence)}
