-- unlock: release the write lock if ARGV[1] still holds it, and take back
-- the "writer waiting" mark of ARGV[2] (a writer that got in or gave up).
-- KEYS[1] writer:  string, uid of the write holder
-- KEYS[2] waiting: string, a waiting writer
-- KEYS[3] readers: zset reader uid -> lease deadline (server ms)
-- KEYS[4] nodes:   string, the holders' node-list fingerprint (guard.lua)
-- ARGV[1] uid, ARGV[2] waiter
-- Returns 1 when released, 0 when it was not (or no longer) held by ARGV[1].
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  released = 1
end
forget_list_if_free(KEYS[1], KEYS[3], KEYS[4], server_ms())
return released
