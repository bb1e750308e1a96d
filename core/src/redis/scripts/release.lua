-- release: give back ARGV[4]'s slot (compare-and-delete) and hand the freed
-- slot to the first live waiter.
-- Returns 1 if the slot was still ours, 0 if it had expired or been taken.
local token = ARGV[4]
-- Fast path: the name is still in the short form acquire.lua's fast path
-- gave it (no shape record), with `token` its sole holder whose lease has
-- not run out (the key may outlive its deadline by a millisecond; the full
-- path purges such a grant and answers 0): nothing else to undo.
local shape = redis.call('GET', shape_key)
local short = not shape and short_form()
if short then
  local _, _, deadline, sole = sole_holder(short)
  if sole == token then
    read_clock()
    if deadline > now_ms then
      redis.call('DEL', holders)
      return 1
    end
  end
end
-- [rules]
settle(shape)
purge_expired()
local released = redis.call('ZREM', holders, token)
if released == 1 then end_grant(token, nil) end
forget_grants({token})
promote(nil)
return released
