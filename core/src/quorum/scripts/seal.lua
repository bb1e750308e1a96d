-- seal: record fencing token ARGV[2] on this node while ARGV[1] still holds
-- the write lock here, so every later write grant on this node gets a
-- larger value (see quorum/engine.rs, "Fencing").
-- KEYS[1] writer: string, uid of the write holder
-- KEYS[2] fence:  string, the last fencing value this node issued or
--                 sealed, for every name; never expires
-- KEYS[3] legacy: string, the name's own last value as versions before
--                 KEYS[2] kept it: raised too while it lives, for them
-- ARGV[1] uid, ARGV[2] token
-- Returns 1 when recorded, 0 when ARGV[1] no longer holds the lock here.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[2])
if token > last then
  redis.call('SET', KEYS[2], ARGV[2])
end
local legacy = redis.call('GET', KEYS[3])
if legacy and token > tonumber(legacy) then
  redis.call('SET', KEYS[3], ARGV[2], 'KEEPTTL')
end
return 1
