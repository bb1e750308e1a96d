-- release: give back ARGV[3]'s slot (compare-and-delete) and hand the freed
-- slot to the first live waiter.
-- Returns 1 if the slot was still ours, 0 if it had expired or been taken.
-- Fast path: the name is still in the short form acquire.lua's fast path
-- gave it, ARGV[3] its sole holder and its lease not run out: nothing else
-- to undo. (held_alone, spelled out: the prelude's helpers come later.)
local short = redis.pcall('GET', holders)
if type(short) == 'string' then
  local deadline, sole = string.match(short, '^%d+ %d+ %d+ (%d+) (.*)$')
  local clock = sole == ARGV[3] and redis.call('TIME')
  if clock and tonumber(deadline) > tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) then
    redis.call('DEL', holders)
    return 1
  end
end
-- [rules]
local token = ARGV[3]
settle()
purge_expired()
local released = redis.call('ZREM', holders, token)
if released == 1 then end_grant(token, nil) end
forget_grants({token})
promote(nil)
return released
