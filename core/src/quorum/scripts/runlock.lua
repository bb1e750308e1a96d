-- runlock: release the read lock of ARGV[1].
-- KEYS[1] readers: zset reader uid -> lease deadline (server ms)
-- KEYS[2] writer:  string, uid of the write holder
-- KEYS[3] nodes:   string, the holders' node-list fingerprint (guard.lua)
-- ARGV[1] uid
-- Returns 1 when released, 0 when it was not (or no longer) held.
local now_ms = server_ms()
local deadline = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
forget_list_if_free(KEYS[2], KEYS[1], KEYS[3], now_ms)
if deadline and tonumber(deadline) > now_ms then return 1 end
return 0
