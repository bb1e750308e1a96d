-- release: give back ARGV[3]'s slot (compare-and-delete) and hand the freed
-- slot to the first live waiter.
-- Returns 1 if the slot was still ours, 0 if it had expired or been taken.
local token = ARGV[3]
-- Fast path: the name is still in the short form acquire.lua's fast path
-- gave it, `token` its sole holder: nothing else to undo.
if held_alone(token) then
  redis.call('DEL', holders)
  return 1
end
-- [rules]
settle()
purge_expired()
local released = redis.call('ZREM', holders, token)
if released == 1 then end_grant(token, nil) end
forget_grants({token})
promote(nil)
return released
