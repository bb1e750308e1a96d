-- runlock: release the read lock of ARGV[1].
-- KEYS[1] readers: zset reader uid -> lease deadline (server ms)
-- ARGV[1] uid
-- Returns 1 when released, 0 when it was not (or no longer) held.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if deadline and tonumber(deadline) > now_ms then return 1 end
return 0
